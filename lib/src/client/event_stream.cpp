// Reading the event stream (memcuda/events.h): XREAD BLOCK on a connection of its own.
#include <algorithm>
#include <cstdlib>

#include "memcuda/events.h"

namespace mcd {

namespace {

// An entry of XREAD or XRANGE: [id, [field, value, ...]]. Fields it does not know are skipped,
// so that a later version may add some.
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
    if (field == "event") e.event = value;
    else if (field == "name") e.name = value;
    else if (field == "node") e.node = value;
    else if (field == "refcount") e.refcount = std::strtoll(value.c_str(), nullptr, 10);
    else if (field == "pid") e.pid = std::strtoll(value.c_str(), nullptr, 10);
    else if (field == "reason") e.reason = value;
  }
  return e;
}

}  // namespace

Result<std::unique_ptr<EventStream>> EventStream::Open(const RedisUrl& url, const KeySpace& keys) {
  MCD_ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> redis, RedisConnection::Connect(url));
  return std::unique_ptr<EventStream>(new EventStream(std::move(redis), keys.Events()));
}

EventStream::EventStream(std::unique_ptr<RedisConnection> redis, std::string key)
    : redis_(std::move(redis)), key_(std::move(key)) {}
EventStream::~EventStream() = default;

Result<std::string> EventStream::Newest() {
  MCD_ASSIGN_OR_RETURN(RedisValue last, redis_->Command({"XREVRANGE", key_, "+", "-", "COUNT", "1"}));
  if (last.elements.empty() || last.elements[0].elements.empty()) return std::string("0-0");
  return last.elements[0].elements[0].str;
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
  // The socket timeout outlasts the block, so that a quiet stream is not taken for a dead link.
  int normal = redis_->timeout_ms();
  MCD_RETURN_IF_ERROR(redis_->SetTimeout(block_ms + 5000));
  auto reply = redis_->Command({"XREAD", "COUNT", std::to_string(count), "BLOCK",
                                std::to_string(std::max(1, block_ms)), "STREAMS", key_, after});
  if (redis_->connected()) (void)redis_->SetTimeout(normal);
  if (!reply.ok()) return reply.status();
  std::vector<LifecycleEvent> events;
  if (reply->is_nil()) return events;  // none came in time
  // [[key, [entry, ...]]]
  if (reply->elements.size() != 1 || reply->elements[0].elements.size() != 2) {
    return Status(ErrorCode::kUnexpectedReply, "XREAD of the event stream");
  }
  for (const RedisValue& entry : reply->elements[0].elements[1].elements) {
    MCD_ASSIGN_OR_RETURN(LifecycleEvent e, ParseEntry(entry));
    events.push_back(std::move(e));
  }
  return events;
}

Status EventStream::Reconnect() { return redis_->Reconnect(); }

}  // namespace mcd
