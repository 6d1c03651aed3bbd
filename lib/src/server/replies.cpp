#include "server/replies.h"

namespace mcd {

// "Redis EVALSHA: WRONGTYPE Operation ... script: <sha>, on @user_script:15." says more about
// the script than a client needs.
std::string RedisWords(const Status& status) {
  std::string words = status.message();
  if (words.rfind("Redis EVALSHA: ", 0) == 0) words.erase(0, 15);
  if (size_t script = words.find(" script: "); script != std::string::npos) words.erase(script);
  return words;
}

bool MayPass(const std::string& words) {
  for (const char* passing :
       {"BUSY", "LOADING", "MASTERDOWN", "TRYAGAIN", "READONLY", "NOSCRIPT", "NOPERM"}) {
    if (words.rfind(passing, 0) == 0) return true;
  }
  return false;
}

}  // namespace mcd
