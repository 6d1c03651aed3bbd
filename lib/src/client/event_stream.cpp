// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Reading the event stream (memcuda/events.h): XREAD BLOCK on a connection of its own.
//
// Gaps. The stream is capped (XADD MAXLEN ~), so a reader that falls behind finds entries after
// its position trimmed, and the ids, which are times, cannot show that any were. XINFO STREAM
// can: Redis 7 counts the entries ever added (entries-added) beside those kept (length), and a
// cap trims the oldest first, so the first `added - length` entries are the ones gone. A reader
// that knows how many entries had come up to its position lost the difference. The counters are
// read in the same MULTI as the entries, so that both describe one instant.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <utility>

#include "memcuda/events.h"

namespace mcd {

namespace {

// An entry of XREAD or XRANGE: [id, [field, value, ...]]. Fields it does not know are skipped,
// so that a later version may add some.
// A number field of an event; -1 when it is not a decimal int64 (a hand-written entry), which
// readers show as such rather than as a count it never was.
int64_t Number(const std::string& text) {
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  return ec == std::errc() && end == text.data() + text.size() ? n : -1;
}

Result<LifecycleEvent> ParseEntry(const RedisValue& entry) {
  if (entry.elements.size() != 2 || entry.elements[1].elements.size() % 2 != 0) {
    return Status(ErrorCode::kUnexpectedReply, "an event stream entry of an unexpected shape");
  }
  LifecycleEvent e;
  e.id = entry.elements[0].str;
  e.time_ms = std::strtoll(e.id.c_str(), nullptr, 10);
  const auto& fields = entry.elements[1].elements;
  for (size_t i = 0; i + 1 < fields.size(); i += 2) {
    const std::string& field = fields[i].str;
    const std::string& value = fields[i + 1].str;
    if (field == "event")
      e.event = value;
    else if (field == "name")
      e.name = value;
    else if (field == "node")
      e.node = value;
    else if (field == "refcount")
      e.refcount = Number(value);
    else if (field == "pid")
      e.pid = Number(value);
    else if (field == "reason")
      e.reason = value;
  }
  return e;
}

// XREAD's reply for one stream: nil, or [[key, [entry, ...]]].
Result<std::vector<LifecycleEvent>> ParseRead(const RedisValue& reply) {
  std::vector<LifecycleEvent> events;
  if (reply.is_nil()) return events;
  if (reply.type == RedisValue::Type::kError) return RedisErrorStatus("XREAD", reply.str);
  if (reply.elements.size() != 1 || reply.elements[0].elements.size() != 2) {
    return Status(ErrorCode::kUnexpectedReply, "XREAD of the event stream");
  }
  for (const RedisValue& entry : reply.elements[0].elements[1].elements) {
    MCD_ASSIGN_OR_RETURN(LifecycleEvent e, ParseEntry(entry));
    events.push_back(std::move(e));
  }
  return events;
}

// What XINFO STREAM says of the entries ever added and those kept.
struct Counters {
  int64_t added = -1;           // entries ever added; -1 where Redis does not say (before 7.0)
  int64_t length = 0;           // entries kept
  std::string first_id;         // the oldest kept; "" when none is
  std::string last_id = "0-0";  // the newest id ever given (last-generated-id)
};

// XINFO STREAM's reply: field, value, ... A stream not written yet (an error reply) has no
// entries.
Result<Counters> ParseCounters(const RedisValue& info) {
  Counters c;
  if (info.type == RedisValue::Type::kError) {
    if (info.str.find("no such key") == std::string::npos) {
      return RedisErrorStatus("XINFO STREAM", info.str);
    }
    c.added = 0;
    return c;
  }
  for (size_t i = 0; i + 1 < info.elements.size(); i += 2) {
    const std::string& field = info.elements[i].str;
    const RedisValue& value = info.elements[i + 1];
    if (field == "length")
      c.length = value.integer;
    else if (field == "entries-added")
      c.added = value.integer;
    else if (field == "last-generated-id")
      c.last_id = value.str;
    else if (field == "first-entry" && !value.elements.empty())
      c.first_id = value.elements[0].str;
  }
  return c;
}

// Stream ids "MS-SEQ" compare as number pairs, not as text.
std::pair<uint64_t, uint64_t> IdNumbers(const std::string& id) {
  char* end = nullptr;
  uint64_t ms = std::strtoull(id.c_str(), &end, 10);
  uint64_t seq = *end == '-' ? std::strtoull(end + 1, nullptr, 10) : 0;
  return {ms, seq};
}
bool IdBefore(const std::string& a, const std::string& b) { return IdNumbers(a) < IdNumbers(b); }

}  // namespace

Result<std::unique_ptr<EventStream>> EventStream::Open(const RedisUrl& url, const KeySpace& keys) {
  MCD_ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> redis, RedisConnection::Connect(url));
  return std::unique_ptr<EventStream>(new EventStream(std::move(redis), keys.Events()));
}

EventStream::EventStream(std::unique_ptr<RedisConnection> redis, std::string key)
    : redis_(std::move(redis)), key_(std::move(key)) {}
EventStream::~EventStream() = default;

Result<std::string> EventStream::Newest() {
  MCD_ASSIGN_OR_RETURN(RedisValue info, redis_->CommandRaw({"XINFO", "STREAM", key_}));
  MCD_ASSIGN_OR_RETURN(Counters c, ParseCounters(info));
  position_ = c.last_id;
  position_number_ = c.added;
  return position_;
}

Result<std::string> EventStream::Since(int64_t age_ms) {
  if (age_ms <= 0) return std::string("0-0");
  MCD_ASSIGN_OR_RETURN(RedisValue time, redis_->Command({"TIME"}));
  if (time.elements.size() != 2) return Status(ErrorCode::kUnexpectedReply, "Redis TIME");
  int64_t now_ms = std::strtoll(time.elements[0].str.c_str(), nullptr, 10) * 1000 +
                   std::strtoll(time.elements[1].str.c_str(), nullptr, 10) / 1000;
  // XREAD reads after an id, excluding it: the last id of the millisecond before the start.
  return std::to_string(std::max<int64_t>(0, now_ms - age_ms - 1)) + "-18446744073709551615";
}

Result<LifecycleEvent> EventStream::Oldest() {
  MCD_ASSIGN_OR_RETURN(RedisValue first, redis_->Command({"XRANGE", key_, "-", "+", "COUNT", "1"}));
  if (first.elements.empty()) return LifecycleEvent{};
  return ParseEntry(first.elements[0]);
}

Result<std::vector<LifecycleEvent>> EventStream::Read(const std::string& after, int block_ms,
                                                      int count) {
  MCD_ASSIGN_OR_RETURN(std::vector<LifecycleEvent> events, ReadKept(after, count));
  if (!events.empty()) return events;
  // Nothing yet: block until something comes, then read it again with the counters, which
  // alone tell whether what came follows `after` or entries were trimmed in between.
  MCD_ASSIGN_OR_RETURN(bool came, Block(after, block_ms));
  if (!came) return events;
  return ReadKept(after, count);
}

Result<std::vector<LifecycleEvent>> EventStream::ReadKept(const std::string& after, int count) {
  MCD_RETURN_IF_ERROR(redis_->Append({"MULTI"}));
  MCD_RETURN_IF_ERROR(
      redis_->Append({"XREAD", "COUNT", std::to_string(count), "STREAMS", key_, after}));
  MCD_RETURN_IF_ERROR(redis_->Append({"XINFO", "STREAM", key_}));
  MCD_RETURN_IF_ERROR(redis_->Append({"EXEC"}));
  // Every reply is read before any is judged, so that none is left for the next command.
  RedisValue replies[4];
  for (RedisValue& reply : replies) {
    MCD_ASSIGN_OR_RETURN(reply, redis_->ReadReply());
  }
  const char* names[4] = {"MULTI", "XREAD", "XINFO STREAM", "EXEC"};
  for (int i = 0; i < 4; ++i) {
    if (replies[i].type == RedisValue::Type::kError) {
      return RedisErrorStatus(names[i], replies[i].str);
    }
  }
  if (replies[3].elements.size() != 2) {
    return Status(ErrorCode::kUnexpectedReply, "EXEC of a read of the event stream");
  }
  MCD_ASSIGN_OR_RETURN(std::vector<LifecycleEvent> events, ParseRead(replies[3].elements[0]));
  MCD_ASSIGN_OR_RETURN(Counters c, ParseCounters(replies[3].elements[1]));

  int64_t number = after == position_ ? position_number_ : -1;
  const int64_t trimmed = c.added - c.length;  // the first `trimmed` entries ever added are gone
  if (number < 0 && after == "0-0") number = trimmed;  // from the oldest kept: nothing lost
  const bool passed = c.first_id.empty() || IdBefore(after, c.first_id);
  const bool gap = c.added >= 0 && trimmed > 0 && passed && (number < 0 || trimmed > number);
  const int64_t read = static_cast<int64_t>(events.size());
  const bool from_oldest = read > 0 && events.front().id == c.first_id;
  position_ = read > 0 ? events.back().id : after;
  if (c.added < 0)
    position_number_ = -1;
  else if (!IdBefore(position_, c.last_id))
    position_number_ = c.added;  // at the end
  else if (gap || from_oldest)
    position_number_ = trimmed + read;
  else
    position_number_ = number < 0 ? -1 : number + read;
  if (gap) {
    LifecycleEvent e;
    e.id = after;
    e.time_ms = std::strtoll((read > 0 ? events.front().id : c.last_id).c_str(), nullptr, 10);
    e.event = "gap";
    e.reason = "trimmed";
    e.missed = number < 0 ? -1 : trimmed - number;
    events.insert(events.begin(), std::move(e));
  }
  return events;
}

Result<bool> EventStream::Block(const std::string& after, int block_ms) {
  // The socket timeout outlasts the block, so that a quiet stream is not taken for a dead link.
  int normal = redis_->timeout_ms();
  MCD_RETURN_IF_ERROR(redis_->SetTimeout(block_ms + 5000));
  auto reply = redis_->Command({"XREAD", "COUNT", "1", "BLOCK",
                                std::to_string(std::max(1, block_ms)), "STREAMS", key_, after});
  if (redis_->connected()) (void)redis_->SetTimeout(normal);
  if (!reply.ok()) return reply.status();
  return !reply->is_nil();
}

Status EventStream::Reconnect() { return redis_->Reconnect(); }

}  // namespace mcd
