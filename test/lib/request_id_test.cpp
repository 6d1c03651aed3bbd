// Request ids: each one 128 fresh random bits, so that nobody who sees a process's reqs (their
// reply keys are visible to every Redis user through SCAN) can write a reply ahead of its next.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "client/transport.h"

namespace mcd {
namespace {

// The random part of a req as a 128-bit number.
unsigned __int128 RandomPart(const std::string& req) {
  unsigned __int128 value = 0;
  for (char c : req.substr(req.size() - 32)) {
    value = value * 16 + static_cast<unsigned>(std::stoi(std::string(1, c), nullptr, 16));
  }
  return value;
}

TEST(RequestId, EveryReqIs128FreshRandomBits) {
  const std::string prefix = "node-42-";
  std::regex form("node-42-[0-9a-f]{32}");
  std::set<std::string> seen;
  std::string previous = NewRequestId(prefix);
  for (int i = 0; i < 1000; ++i) {
    std::string req = NewRequestId(prefix);
    ASSERT_TRUE(std::regex_match(req, form)) << req;
    ASSERT_TRUE(seen.insert(req).second) << "repeated " << req;
    // Not the previous one counted on, nor any near it: no relation an observer could use.
    unsigned __int128 a = RandomPart(previous), b = RandomPart(req);
    unsigned __int128 distance = a > b ? a - b : b - a;
    EXPECT_GT(distance, static_cast<unsigned __int128>(1) << 64) << previous << " then " << req;
    // The shared prefix of two random parts is short: at most 8 hex digits in 1000 draws.
    size_t common = 0;
    while (common < 32 && previous[prefix.size() + common] == req[prefix.size() + common]) ++common;
    EXPECT_LE(common, 8u) << previous << " then " << req;
    previous = req;
  }
}

}  // namespace
}  // namespace mcd
