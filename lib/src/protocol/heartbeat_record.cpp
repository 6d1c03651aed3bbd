// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The heartbeat's codec (memcuda/heartbeat.h): one table of its fields, read both ways.
// Pure functions; any thread.
#include <charconv>

#include "memcuda/heartbeat.h"

namespace mcd {

namespace {

namespace f = heartbeat_field;
using R = HeartbeatRecord;

// One field of the table: its name and the member it holds, one of the three kinds.
struct FieldSpec {
  const char* name;
  std::string R::*text = nullptr;
  int64_t R::*number = nullptr;
  uint64_t R::*count = nullptr;
  bool empty_when_zero = false;  // a count written as "" when 0
};

FieldSpec Text(const char* name, std::string R::*member) { return {name, member}; }
FieldSpec Number(const char* name, int64_t R::*member) { return {name, nullptr, member}; }
FieldSpec Count(const char* name, uint64_t R::*member, bool empty_when_zero = false) {
  return {name, nullptr, nullptr, member, empty_when_zero};
}

// The fixed fields, in the order the server writes them; then errors_<code>, commands_failed
// and latency_<op>.
const std::vector<FieldSpec>& Table() {
  static const std::vector<FieldSpec> table = {
      Text(f::kInstance, &R::instance),
      Number(f::kPid, &R::pid),
      Count(f::kPidStart, &R::pid_start),
      Count(f::kPidIno, &R::pid_ino, true),
      Text(f::kPidSpace, &R::pid_space),
      Text(f::kNode, &R::node),
      Text(f::kDevices, &R::devices),
      Text(f::kAllocator, &R::allocator),
      Text(f::kPoolSocket, &R::pool_socket),
      Text(f::kPoolFd, &R::pool_fd),
      Text(f::kIpcPrimer, &R::ipc_primer),
      Text(f::kPoolPrimer, &R::pool_primer),
      Text(f::kCommandSocket, &R::command_socket),
      Text(f::kUcxAddress, &R::ucx_address),
      Text(f::kUcxVersion, &R::ucx_version),
      Text(f::kNodeCopies, &R::node_copies),
      Count(f::kPoolUsed, &R::pool_used),
      Count(f::kReadyBytes, &R::ready_bytes),
      Count(f::kSlabBytes, &R::slab_bytes),
      Count(f::kSlabFreeBytes, &R::slab_free_bytes),
      Number(f::kStarted, &R::started_ms),
      Text(f::kQueue, &R::queue),
      Text(f::kNodeQueue, &R::node_queue),
      Text(f::kVersion, &R::version),
      Count(f::kEventHistory, &R::event_history),
      Count(f::kTensors, &R::tensors),
      Count(f::kTensorBytes, &R::tensor_bytes),
      Text(f::kDeviceTensors, &R::device_tensors),
      Count(f::kCommandsOk, &R::commands_ok),
      Text(f::kSettled, &R::settled),
  };
  return table;
}

// At most 40 characters of `text`, control characters as '?': an error is one short line.
std::string Shown(const std::string& text) {
  std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return shown;
}

// Empty reads as 0, as a field never written does; anything else must be all of the number.
template <typename T>
Status ParseField(const std::string& name, const std::string& text, T& out) {
  out = 0;
  if (text.empty()) return Status::Ok();
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (ec == std::errc() && ptr == text.data() + text.size()) return Status::Ok();
  return Status(ErrorCode::kUnexpectedReply, "the heartbeat's field '" + Shown(name) + "' is '" +
                                                 Shown(text) + "', not a number of its kind");
}

bool StartsWith(const std::string& text, const char* prefix) {
  return text.compare(0, std::char_traits<char>::length(prefix), prefix) == 0;
}

}  // namespace

namespace {
// A field of the table (not the errors_ and latency_ families): read into its member.
bool Known(const std::string& name) {
  for (const FieldSpec& spec : Table()) {
    if (name == spec.name) return true;
  }
  return false;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> HeartbeatFields(const HeartbeatRecord& r) {
  std::vector<std::pair<std::string, std::string>> fields;
  fields.reserve(Table().size() + r.errors.size() + 1 + r.latency.size());
  for (const FieldSpec& spec : Table()) {
    if (spec.text != nullptr) {
      fields.emplace_back(spec.name, r.*spec.text);
    } else if (spec.number != nullptr) {
      fields.emplace_back(spec.name, std::to_string(r.*spec.number));
    } else {
      uint64_t n = r.*spec.count;
      fields.emplace_back(spec.name, n == 0 && spec.empty_when_zero ? "" : std::to_string(n));
    }
  }
  for (const auto& [code, n] : r.errors)
    fields.emplace_back(f::kErrorsPrefix + code, std::to_string(n));
  fields.emplace_back(f::kCommandsFailed, std::to_string(r.commands_failed));
  for (const auto& [op, text] : r.latency) fields.emplace_back(f::kLatencyPrefix + op, text);
  fields.insert(fields.end(), r.other.begin(), r.other.end());
  return fields;
}

Result<HeartbeatRecord> HeartbeatFromFields(const std::map<std::string, std::string>& fields) {
  HeartbeatRecord r;
  static const std::string kEmpty;
  for (const FieldSpec& spec : Table()) {
    auto it = fields.find(spec.name);
    const std::string& value = it == fields.end() ? kEmpty : it->second;
    if (spec.text != nullptr) {
      r.*spec.text = value;
    } else if (spec.number != nullptr) {
      MCD_RETURN_IF_ERROR(ParseField(spec.name, value, r.*spec.number));
    } else {
      MCD_RETURN_IF_ERROR(ParseField(spec.name, value, r.*spec.count));
    }
  }
  auto failed = fields.find(f::kCommandsFailed);
  if (failed != fields.end())
    MCD_RETURN_IF_ERROR(ParseField(failed->first, failed->second, r.commands_failed));
  const size_t errors = std::char_traits<char>::length(f::kErrorsPrefix);
  const size_t latency = std::char_traits<char>::length(f::kLatencyPrefix);
  for (const auto& [name, value] : fields) {
    if (StartsWith(name, f::kErrorsPrefix)) {
      uint64_t n = 0;
      MCD_RETURN_IF_ERROR(ParseField(name, value, n));
      r.errors.emplace_back(name.substr(errors), n);
    } else if (StartsWith(name, f::kLatencyPrefix)) {
      r.latency.emplace_back(name.substr(latency), value);
    } else if (name != f::kCommandsFailed && !Known(name)) {
      r.other.emplace_back(name, value);
    }
  }
  return r;
}

Result<HeartbeatRecord> HeartbeatFromHmget(const std::vector<const char*>& names,
                                           const RedisValue& reply) {
  if (reply.type != RedisValue::Type::kArray || reply.elements.size() != names.size())
    return Status(ErrorCode::kUnexpectedReply, "HMGET reply of the heartbeat");
  std::map<std::string, std::string> fields;
  for (size_t i = 0; i < names.size(); ++i) {
    const RedisValue& value = reply.elements[i];
    if (value.is_nil()) continue;
    if (value.type != RedisValue::Type::kString)
      return Status(ErrorCode::kUnexpectedReply, "HMGET reply of the heartbeat");
    fields.emplace(names[i], value.str);
  }
  return HeartbeatFromFields(fields);
}

std::map<std::string, std::string> HeartbeatMap(const HeartbeatRecord& record) {
  auto fields = HeartbeatFields(record);
  return std::map<std::string, std::string>(fields.begin(), fields.end());
}

}  // namespace mcd
