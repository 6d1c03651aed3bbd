// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "throughput.h"

#include "children.h"

namespace mcd::bench {

namespace {

std::vector<std::string> WithArgs(std::vector<std::string> args,
                                  const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

double RedisCpuSeconds(RedisConnection* redis) {
  if (!redis) return -1;  // the floor has not run
  auto info = redis->Command({"INFO", "cpu"});
  if (!info.ok() || info->type == RedisValue::Type::kError) return -1;
  double total = 0;
  for (const char* field : {"used_cpu_sys", "used_cpu_user"}) {
    std::string value = InfoField(info->str, field);
    if (value.empty()) return -1;
    total += std::strtod(value.c_str(), nullptr);
  }
  return total;
}

std::pair<double, double> ServerCpuSeconds(Client& client) {
  auto info = client.ServerRecord();
  if (!info.ok() || info->pid <= 0) return {-1, -1};
  const std::string pid = std::to_string(info->pid);
  return {ProcCpuSeconds("/proc/" + pid + "/stat"),
          ProcCpuSeconds("/proc/" + pid + "/task/" + pid + "/stat")};
}

Result<Row> MeasureThroughput(const Options& opt, RedisConnection* redis, Client& client,
                              const std::string& kind, int device, uint64_t bytes, int clients,
                              const std::vector<std::string>& connection_args) {
  Say("throughput with " + std::to_string(clients) + " clients " + kind);
  double seconds = std::min(opt.max_seconds, 3.0);
  std::vector<Child> children;
  double cpu0 = RedisCpuSeconds(redis);
  auto [server0, thread0] = ServerCpuSeconds(client);
  auto t0 = Clock::now();
  for (int c = 0; c < clients; ++c) {
    children.push_back(
        SpawnChild(WithArgs({"--child", "churn", "--child-device", DeviceName(device),
                             "--child-bytes", std::to_string(bytes), "--child-seconds",
                             std::to_string(seconds), "--child-id", std::to_string(c)},
                            connection_args)));
  }
  Row row{"create+delete_x" + std::to_string(clients),
          kind,
          device,
          bytes,
          {},
          0,
          std::to_string(clients) + (clients == 1 ? " client process" : " client processes") +
              ", create+delete pairs"};
  for (Child& child : children) {
    std::istringstream in(ReadLine(child.from));
    size_t pairs = 0, read = 0;
    in >> pairs;
    for (double create_us, delete_us; in >> create_us >> delete_us; ++read) {
      row.create_us.push_back(create_us);
      row.delete_us.push_back(delete_us);
      row.us.push_back(create_us + delete_us);
    }
    if (WaitChild(child) != 0) return Status(ErrorCode::kInternal, "a throughput client failed");
    if (read != pairs || pairs == 0) {
      return Status(ErrorCode::kInternal, "a throughput client reported " + std::to_string(pairs) +
                                              " pairs but " + std::to_string(read) + " latencies");
    }
  }
  double wall = Us(t0, Clock::now()) / 1e6;
  double cpu1 = RedisCpuSeconds(redis);
  auto [server1, thread1] = ServerCpuSeconds(client);
  row.ops_per_s = static_cast<double>(row.us.size()) / std::max(wall, seconds);
  if (cpu0 >= 0 && cpu1 >= cpu0 && !row.us.empty()) {
    // Which of Redis and the server bounds the rate: Redis's CPU per pair, and how busy it was.
    row.redis_cpu_us = (cpu1 - cpu0) * 1e6 / static_cast<double>(row.us.size());
    row.note += "; Redis CPU " + Whole(row.redis_cpu_us) + " us per pair, " +
                Whole((cpu1 - cpu0) * 100 / wall) + "% busy";
  }
  if (server0 >= 0 && server1 >= server0 && thread0 >= 0 && thread1 >= thread0 && !row.us.empty()) {
    row.server_cpu_us = (server1 - server0) * 1e6 / static_cast<double>(row.us.size());
    row.server_thread_busy = (thread1 - thread0) / wall;
    row.note += "; server CPU " + Whole(row.server_cpu_us) + " us per pair, its command thread " +
                Whole(row.server_thread_busy * 100) + "% busy";
  }
  row.note += "; p99 of the create " + Whole(Percentile(row.create_us, 0.99)) +
              " us, of the delete " + Whole(Percentile(row.delete_us, 0.99)) + " us";
  return row;
}

}  // namespace mcd::bench
