// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

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
  // A commit's reply is read raw (its status built without RedisErrorStatus): its words are
  // classified here by the same reading. Beside the states that pass, a commit refused for its
  // ACL or for a script Redis lost may go through once either is put back.
  RedisRefusal refusal = ClassifyRedisError(words);
  return refusal == RedisRefusal::kPasses || refusal == RedisRefusal::kNoPermission ||
         refusal == RedisRefusal::kNoScript;
}

}  // namespace mcd
