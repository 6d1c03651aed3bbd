// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The Redis URL grammar (RedisUrl::Parse: redis://, unix:// and redis-sentinel://) and a URL's
// redacted form, for messages. Pure functions; any thread.
#include <charconv>
#include <string>
#include <string_view>

#include "memcuda/redis.h"
#include "protocol/text.h"
#include "redis/redis_text.h"

namespace mcd {

bool ParseInt(std::string_view text, int& out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

namespace {

std::string PercentDecode(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size()) {
      int value = 0;
      auto [ptr, ec] = std::from_chars(in.data() + i + 1, in.data() + i + 3, value, 16);
      if (ec == std::errc() && ptr == in.data() + i + 3) {
        out.push_back(static_cast<char>(value));
        i += 2;
        continue;
      }
    }
    out.push_back(in[i]);
  }
  return out;
}

// The part of a redis-sentinel:// URL after its credentials:
// host[:port][,host[:port]...]/MASTER[/db].
template <typename Bad>
Status ParseSentinels(std::string_view rest, RedisUrl& out, const Bad& bad) {
  size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return bad("a sentinel URL names its master: .../MASTER");
  std::string_view hosts = rest.substr(0, slash), path = rest.substr(slash + 1);
  size_t next = path.find('/');
  out.master = std::string(path.substr(0, next));
  if (out.master.empty()) return bad("a sentinel URL names its master: .../MASTER");
  if (next != std::string_view::npos) {
    std::string_view db = path.substr(next + 1);
    if (!db.empty() && (!ParseInt(db, out.db) || out.db < 0)) return bad("db must be a number");
  }
  for (bool more = true; more;) {
    size_t comma = hosts.find(',');
    std::string_view item = hosts.substr(0, comma);
    more = comma != std::string_view::npos;
    if (more) hosts = hosts.substr(comma + 1);
    std::string host(item);
    int port = 26379;
    if (!item.empty() && item[0] == '[') {  // [::1]:26379
      size_t close = item.find(']');
      if (close == std::string_view::npos) return bad("unterminated IPv6 address");
      host = std::string(item.substr(1, close - 1));
      std::string_view tail = item.substr(close + 1);
      if (!tail.empty() && (tail[0] != ':' || !ParseInt(tail.substr(1), port)))
        return bad("bad port");
    } else if (size_t colon = item.rfind(':'); colon != std::string_view::npos) {
      host = std::string(item.substr(0, colon));
      if (!ParseInt(item.substr(colon + 1), port)) return bad("bad port");
    }
    if (host.empty()) return bad("empty sentinel host");
    if (port <= 0 || port > 65535) return bad("port out of range");
    out.sentinels.emplace_back(std::move(host), port);
  }
  if (out.sentinels.empty()) return bad("no sentinel named");
  out.host = out.sentinels[0].first;  // until a sentinel names the master
  out.port = 0;
  return Status::Ok();
}

}  // namespace

Result<RedisUrl> RedisUrl::Parse(std::string_view url) {
  RedisUrl out;
  auto bad = [&](const std::string& why) {
    return Status(
        ErrorCode::kInvalidArgument,
        "bad Redis URL (" + why +
            "); expected redis://[user:password@]host:port/db, "
            "unix:///path/to.sock or redis-sentinel://host:port[,host:port...]/MASTER[/db]");
  };
  std::string_view rest;
  bool sentinel = url.rfind("redis-sentinel://", 0) == 0;
  if (sentinel) {
    rest = url.substr(17);
  } else if (url.rfind("redis://", 0) == 0) {
    rest = url.substr(8);
  } else if (url.rfind("unix://", 0) == 0) {
    out.is_unix = true;
    rest = url.substr(7);
  } else {
    return bad("unknown scheme");
  }
  // Credentials: everything before the last '@' of the authority part.
  if (!out.is_unix || rest.find('@') != std::string_view::npos) {
    size_t at = rest.rfind('@');
    if (at != std::string_view::npos) {
      std::string_view userinfo = rest.substr(0, at);
      rest = rest.substr(at + 1);
      size_t colon = userinfo.find(':');
      if (colon == std::string_view::npos) {
        out.password = PercentDecode(userinfo);  // redis://secret@host, as redis-cli
      } else {
        out.user = PercentDecode(userinfo.substr(0, colon));
        out.password = PercentDecode(userinfo.substr(colon + 1));
      }
    }
  }
  std::string_view query;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (sentinel) {
    MCD_RETURN_IF_ERROR(ParseSentinels(rest, out, bad));
  } else if (out.is_unix) {
    if (rest.empty() || rest[0] != '/') return bad("unix socket path must be absolute");
    out.path = std::string(rest);
  } else {
    std::string_view hostport = rest;
    if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
      hostport = rest.substr(0, slash);
      std::string_view db = rest.substr(slash + 1);
      if (!db.empty() && (!ParseInt(db, out.db) || out.db < 0)) return bad("db must be a number");
    }
    if (!hostport.empty() && hostport[0] == '[') {  // [::1]:6379
      size_t close = hostport.find(']');
      if (close == std::string_view::npos) return bad("unterminated IPv6 address");
      out.host = std::string(hostport.substr(1, close - 1));
      hostport = hostport.substr(close + 1);
      if (!hostport.empty()) {
        if (hostport[0] != ':' || !ParseInt(hostport.substr(1), out.port)) return bad("bad port");
      }
    } else if (size_t colon = hostport.rfind(':'); colon != std::string_view::npos) {
      out.host = std::string(hostport.substr(0, colon));
      if (!ParseInt(hostport.substr(colon + 1), out.port)) return bad("bad port");
    } else if (!hostport.empty()) {
      out.host = std::string(hostport);
    }
    if (out.host.empty()) out.host = "127.0.0.1";
    if (out.port <= 0 || out.port > 65535) return bad("port out of range");
  }
  // Query parameters: db=N (the only one understood; others are refused, not ignored).
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (kv.rfind("db=", 0) == 0) {
      if (!ParseInt(kv.substr(3), out.db) || out.db < 0) return bad("db must be a number");
    } else {
      return bad("unknown parameter '" + std::string(kv) + "'");
    }
  }
  return out;
}

std::string RedisUrl::Redacted() const {
  std::string auth;
  if (!user.empty() || !password.empty()) {
    auth = user + (password.empty() ? "" : ":***") + "@";
  }
  if (is_unix) return "unix://" + auth + path + (db != 0 ? "?db=" + std::to_string(db) : "");
  if (via_sentinel()) {
    std::string hosts;
    for (const auto& [h, p] : sentinels) {
      hosts += (hosts.empty() ? "" : ",") + (h.find(':') != std::string::npos ? "[" + h + "]" : h) +
               ":" + std::to_string(p);
    }
    return "redis-sentinel://" + auth + hosts + "/" + master +
           (db != 0 ? "/" + std::to_string(db) : "");
  }
  if (!named()) return "(no Redis named)";
  bool v6 = host.find(':') != std::string::npos;
  return "redis://" + auth + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) +
         (db != 0 ? "/" + std::to_string(db) : "");
}

}  // namespace mcd
