// Times Client::Open and Client::Close of existing tensors in a fresh process (the records
// close-probe-*.txt): built against libmemcuda with
//   g++ -std=c++17 -O2 -I lib/include close_probe.cpp -L build/lib -lmemcuda
#include <chrono>
#include <cstdio>
#include "memcuda/client.h"
using namespace mcd;
using Clock = std::chrono::steady_clock;
static double Us(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }
int main(int argc, char** argv) {
  ClientOptions o;
  auto url = ResolveRedisUrl("");
  if (!url.ok()) return 2;
  o.redis_url = url.value();
  if (const char* n = getenv("NODE")) o.node = n;
  auto c = Client::Connect(o);
  if (!c.ok()) { fprintf(stderr, "%s\n", c.status().ToString().c_str()); return 3; }
  auto& client = *c.value();
  if (!client.Warmup(0).ok()) return 4;
  for (int i = 1; i < argc; ++i) {
    auto t0 = Clock::now();
    auto v = client.Open(argv[i]);
    auto t1 = Clock::now();
    if (!v.ok()) { fprintf(stderr, "%s\n", v.status().ToString().c_str()); return 5; }
    Status s = client.Close(argv[i]);
    auto t2 = Clock::now();
    printf("%s open %.0f close %.0f %s\n", argv[i], Us(t0, t1), Us(t1, t2), s.ok() ? "" : s.ToString().c_str());
  }
  return 0;
}
