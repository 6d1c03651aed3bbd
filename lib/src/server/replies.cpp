#include "server/replies.h"

#include <nlohmann/json.hpp>

namespace mcd {

std::string ErrorReply(const std::string& req, const char* op, const Status& status) {
  using nlohmann::json;
  json doc = {{"ok", false}, {"error", {{"code", ErrorName(status.code())}, {"message", status.message()}}}};
  if (!req.empty()) doc["req"] = req;
  if (op != nullptr) doc["op"] = op;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

// req holds only name characters (ParseCommand checks it), so it needs no escaping.
std::string ReplyHead(const std::string& req, Op op) {
  std::string out = std::string(R"({"ok":true,"op":")") + OpName(op) + "\"";
  if (!req.empty()) out += R"(,"req":")" + req + "\"";
  return out + R"(,"tensor":)";
}

// "Redis EVALSHA: WRONGTYPE Operation ... script: <sha>, on @user_script:15." says more about
// the script than a client needs.
std::string RedisWords(const Status& status) {
  std::string words = status.message();
  if (words.rfind("Redis EVALSHA: ", 0) == 0) words.erase(0, 15);
  if (size_t script = words.find(" script: "); script != std::string::npos) words.erase(script);
  return words;
}

bool MayPass(const std::string& words) {
  for (const char* passing : {"BUSY", "LOADING", "MASTERDOWN", "TRYAGAIN", "READONLY", "NOSCRIPT", "NOPERM"}) {
    if (words.rfind(passing, 0) == 0) return true;
  }
  return false;
}

}  // namespace mcd
