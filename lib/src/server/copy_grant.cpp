#include "server/copy_grant.h"

#include "memcuda/protocol.h"
#include "server/copy_wire.h"

namespace mcd {

bool SameSecret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

std::string CopyGrantValue(std::string_view token, std::string_view serving_node,
                           std::string_view asker_node, int64_t ctime_ms, std::string_view name) {
  std::string value = HexEncode(token);
  for (std::string_view field : {serving_node, asker_node}) (value += '\n') += field;
  value += '\n' + std::to_string(ctime_ms) + '\n';
  return value += name;
}

Result<RedisConnection*> CopyGrants::Connection() {
  if (conn_ && conn_->connected()) return conn_.get();
  conn_.reset();
  RedisOptions ropt;
  ropt.command_timeout_ms = 5000;
  MCD_ASSIGN_OR_RETURN(conn_, RedisConnection::Connect(opt_.redis_url, ropt));
  return conn_.get();
}

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
  if (!set.ok()) {
    return Status(set.status().code(),
                  "writing the copy's grant into Redis: " + set.status().message());
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
  // One round trip for every read waiting: a flood of reads costs a pipelined GETDEL each.
  for (size_t i = 0; i < reads.size() && lost.ok(); ++i) {
    lost = conn.value()->Append({"GETDEL", opt_.keys.CopyGrant(HexEncode(reads[i].grant.id))});
  }
  if (!lost.ok()) conn_.reset();
  std::vector<Status> out;
  for (const CopyService::Read& read : reads) {
    auto unavailable = [](const Status& why) {
      return Status(ErrorCode::kUnavailable, "checking the read's grant: " + why.message());
    };
    if (!lost.ok()) {
      out.push_back(unavailable(lost));
      continue;
    }
    Result<RedisValue> held = conn.value()->ReadCommandReply("GETDEL");
    if (!held.ok()) {
      // An error reply leaves the connection in step; anything else loses it, with the replies
      // still due on it: connect again next time.
      if (!conn.value()->connected()) {
        lost = held.status();
        conn_.reset();
      }
      out.push_back(unavailable(held.status()));
      continue;
    }
    std::string expected =
        CopyGrantValue(read.grant.token, opt_.node, read.asker_node, read.ctime_ms, read.name);
    if (held->type != RedisValue::Type::kString || !SameSecret(held->str, expected)) {
      out.push_back(Status(ErrorCode::kPermissionDenied,
                           "no grant for that read in this server's Redis: copies are served only "
                           "to servers that share its Redis and prefix"));
      continue;
    }
    out.push_back(Status::Ok());
  }
  return out;
}

}  // namespace mcd
