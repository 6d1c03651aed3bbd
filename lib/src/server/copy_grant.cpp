// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/copy_grant.h"

#include <algorithm>

#include "memcuda/protocol.h"
#include "redis/script_calls.h"
#include "server/copy_wire.h"

namespace mcd {

std::string CopyGrantValue(std::string_view token, std::string_view serving_node,
                           std::string_view asker_node, int64_t ctime_ms, std::string_view name) {
  std::string value = HexEncode(token);
  for (std::string_view field : {serving_node, asker_node}) (value += '\n') += field;
  value += '\n' + std::to_string(ctime_ms) + '\n';
  return value += name;
}

Result<RedisConnection*> CopyGrants::Connection() {
  if (conn_ && conn_->connected()) return conn_.get();
  if (conn_) Lost();
  // Every attempt may cost the serving loop a connect timeout, or a command timeout on a Redis
  // that accepts and never answers: while Redis has failed lately, reads are refused at once
  // instead, so that a Redis outage, or a flood of reads meanwhile, does not stall the loop.
  if (std::chrono::steady_clock::now() < retry_at_) {
    return Status(ErrorCode::kUnavailable, "Redis failed a moment ago; trying again shortly");
  }
  RedisOptions ropt;
  ropt.command_timeout_ms = 5000;
  auto connected = RedisConnection::Connect(opt_.redis_url, ropt);
  if (!connected.ok()) {
    Lost();
    return connected.status();
  }
  conn_ = std::move(connected.value());
  return conn_.get();
}

void CopyGrants::Lost() {
  conn_.reset();
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
}

void CopyGrants::Answered() { backoff_ = kMinBackoff; }

Result<CopyGrant> CopyGrants::Issue(const std::string& serving_node, const std::string& name,
                                    int64_t ctime_ms, int ttl_ms) {
  CopyGrant grant;
  grant.id.resize(copy_wire::kIdBytes);
  grant.token.resize(copy_wire::kIdBytes);
  MCD_RETURN_IF_ERROR(SecureRandom(grant.id.data(), grant.id.size()));
  MCD_RETURN_IF_ERROR(SecureRandom(grant.token.data(), grant.token.size()));
  MCD_ASSIGN_OR_RETURN(RedisConnection * conn, Connection());
  std::string value = CopyGrantValue(grant.token, serving_node, opt_.node, ctime_ms, name);
  auto set = conn->Command(
      {"SET", opt_.keys.CopyGrant(HexEncode(grant.id)), value, "PX", std::to_string(ttl_ms), "NX"});
  if (conn->connected()) Answered();
  if (!set.ok()) {
    return Status(set.status().code(),
                  "writing the copy's grant into Redis: " + set.status().message());
  }
  // NX answers nil when the key is there already: that grant is someone else's, not this one.
  if (set->type != RedisValue::Type::kStatus || set->str != "OK") {
    return Status(ErrorCode::kUnexpectedReply,
                  "writing the copy's grant into Redis: its key was there already");
  }
  return grant;
}

void CopyGrants::Withdraw(const CopyGrant& grant) {
  auto conn = Connection();
  // Best effort: a grant left behind expires, and its token went only to the asked server.
  if (conn.ok()) (void)conn.value()->Command({"DEL", opt_.keys.CopyGrant(HexEncode(grant.id))});
}

std::vector<Status> CopyGrants::Redeem(const std::vector<CopyService::Read>& reads) {
  auto conn = Connection();
  Status lost = conn.ok() ? Status::Ok() : conn.status();
  // One round trip for every read waiting: a flood of reads costs a pipelined script each.
  for (size_t i = 0; i < reads.size() && lost.ok(); ++i) {
    const CopyService::Read& read = reads[i];
    std::string expected =
        CopyGrantValue(read.grant.token, opt_.node, read.asker_node, read.ctime_ms, read.name);
    std::string grant = opt_.keys.CopyGrant(HexEncode(read.grant.id));
    lost = conn.value()->Append(RedeemGrantCall({grant, expected}));
  }
  if (conn.ok() && !lost.ok()) Lost();
  std::vector<Status> out;
  for (size_t i = 0; i < reads.size(); ++i) {
    auto unavailable = [](const Status& why) {
      return Status(ErrorCode::kUnavailable, "checking the read's grant: " + why.message());
    };
    if (!lost.ok()) {
      out.push_back(unavailable(lost));
      continue;
    }
    Result<bool> taken = ParseRedeemGrantReply(conn.value()->ReadCommandReply("EVAL"));
    if (!taken.ok()) {
      // An error reply leaves the connection in step; anything else loses it, with the replies
      // still due on it: connect again later.
      if (!conn.value()->connected()) {
        lost = taken.status();
        Lost();
      }
      out.push_back(unavailable(taken.status()));
      continue;
    }
    Answered();
    if (!taken.value()) {
      out.push_back(Status(ErrorCode::kPermissionDenied,
                           "no grant for that read in this server's Redis: the asking server gave "
                           "up on it (timed out or stopped), or the two do not share one Redis "
                           "and prefix, which copies need"));
      continue;
    }
    out.push_back(Status::Ok());
  }
  return out;
}

}  // namespace mcd
