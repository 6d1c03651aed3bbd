#include "report.h"

namespace mcd::bench {

namespace {
std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace

void PrintTable(const json& record) {
  std::vector<std::vector<std::string>> rows = {
      {"ROW", "ALLOCATOR", "SIZE", "N", "MEDIAN_US", "P90_US", "P99_US", "OPS/S", "X_FLOOR", "NOTE"}};
  for (const json& r : record["rows"]) {
    rows.push_back({r["row"], r["allocator"], r["bytes"].get<uint64_t>() ? tools::HumanBytes(r["bytes"]) : "-",
                    std::to_string(r["n"].get<size_t>()), Fixed(r["median_us"], 1), Fixed(r["p90_us"], 1),
                    Fixed(r["p99_us"], 1), Fixed(r["ops_per_s"], 0), Fixed(r["x_floor"], 1),
                    r.value("note", "")});
  }
  std::cout << tools::FormatTable(rows, 0, 0);
}


}  // namespace mcd::bench
