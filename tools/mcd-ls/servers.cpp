// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "servers.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "memcuda/heartbeat.h"
#include "tool_common.h"

namespace mcd::tools {
namespace {

using Heartbeats = std::vector<HeartbeatRecord>;

double UptimeSeconds(const HeartbeatRecord& hb) {
  return hb.started_ms > 0 ? static_cast<double>(NowMs() - hb.started_ms) / 1000.0 : 0.0;
}

// A server's tensors and bytes by device (its heartbeat's device_tensors, "cpu:2:4096,0:1:1024"):
// one entry per device; none from a server too old to write them.
struct DeviceTensorCount {
  std::string device;
  uint64_t tensors = 0, bytes = 0;
};
std::vector<DeviceTensorCount> ByDevice(const HeartbeatRecord& hb) {
  std::vector<DeviceTensorCount> out;
  std::istringstream items(hb.device_tensors);
  for (std::string item; std::getline(items, item, ',');) {
    size_t first = item.find(':'), second = item.rfind(':');
    if (first == std::string::npos || second == first) continue;  // not of this layout: left out
    out.push_back({item.substr(0, first), std::strtoull(item.c_str() + first + 1, nullptr, 10),
                   std::strtoull(item.c_str() + second + 1, nullptr, 10)});
  }
  return out;
}

nlohmann::json DeviceTensors(const HeartbeatRecord& hb) {
  nlohmann::json out = nlohmann::json::object();
  for (const DeviceTensorCount& d : ByDevice(hb))
    out[d.device] = {{"tensors", d.tensors}, {"bytes", d.bytes}};
  return out;
}

// Per-code error counters, by code.
std::map<std::string, uint64_t> Errors(const HeartbeatRecord& hb) {
  return std::map<std::string, uint64_t>(hb.errors.begin(), hb.errors.end());
}

std::string Table(const Heartbeats& servers, bool headers) {
  std::vector<std::vector<std::string>> rows;
  if (headers) {
    rows.push_back({"NODE", "INSTANCE", "PID", "DEVICES", "ALLOCATOR", "COPIES", "UP", "TENSORS",
                    "HELD", "OK", "FAILED"});
  }
  for (const HeartbeatRecord& hb : servers) {
    // Every value one field (in_place, as the heartbeat says it), for awk.
    rows.push_back({hb.node, hb.instance, std::to_string(hb.pid), hb.devices, hb.allocator,
                    hb.node_copies.empty() ? "-" : hb.node_copies,
                    HumanAge(static_cast<int64_t>(UptimeSeconds(hb) * 1000)),
                    std::to_string(hb.tensors), HumanBytes(hb.tensor_bytes),
                    std::to_string(hb.commands_ok), std::to_string(hb.commands_failed)});
  }
  return FormatTable(rows, TerminalWidth(), 0);
}

std::string Json(const Heartbeats& servers) {
  nlohmann::json out = nlohmann::json::array();
  for (const HeartbeatRecord& hb : servers) {
    // pid and started_ms as unsigned, as they always were printed.
    out.push_back({{"node", hb.node},
                   {"instance", hb.instance},
                   {"pid", static_cast<uint64_t>(hb.pid)},
                   {"devices", hb.devices},
                   {"allocator", hb.allocator},
                   {"node_copies", hb.node_copies},
                   {"started_ms", static_cast<uint64_t>(hb.started_ms)},
                   {"uptime_s", UptimeSeconds(hb)},
                   {"tensors", hb.tensors},
                   {"tensor_bytes", hb.tensor_bytes},
                   {"device_tensors", DeviceTensors(hb)},
                   {"commands_ok", hb.commands_ok},
                   {"commands_failed", hb.commands_failed},
                   {"errors", Errors(hb)},
                   {"pool_used_bytes", hb.pool_used},
                   {"ready_bytes", hb.ready_bytes},
                   {"slab_bytes", hb.slab_bytes},
                   {"queue", hb.queue}});
  }
  return out.dump() + "\n";  // one line, as every --json of the tools
}

// A label value as the text format wants it: backslash, quote and newline escaped.
std::string Label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// Microseconds as seconds, exactly ("0.00005").
std::string SecondsText(uint64_t us) {
  std::string digits = std::to_string(us);
  if (digits.size() <= 6) digits.insert(0, 7 - digits.size(), '0');
  digits.insert(digits.size() - 6, ".");
  while (digits.back() == '0') digits.pop_back();
  if (digits.back() == '.') digits.pop_back();
  return digits;
}

// Each series names its server by node and by `server` (the instance's id): Prometheus keeps
// `instance` for the scrape target.
std::string ServerLabels(const HeartbeatRecord& hb) {
  return "node=\"" + Label(hb.node) + "\",server=\"" + Label(hb.instance) + "\"";
}

// Tensors and their bytes by device; a server too old to say by device gives its totals without
// the label.
void TensorsByDevice(std::ostream& out, const Heartbeats& servers) {
  struct ByDeviceGauge {
    const char* name;
    const char* help;
    uint64_t DeviceTensorCount::*field;
    uint64_t HeartbeatRecord::*total;
  };
  const ByDeviceGauge by_device[] = {
      {"mcd_tensors", "Tensors the server holds, by device.", &DeviceTensorCount::tensors,
       &HeartbeatRecord::tensors},
      {"mcd_tensor_bytes", "Bytes of the tensors the server holds, by device.",
       &DeviceTensorCount::bytes, &HeartbeatRecord::tensor_bytes},
  };
  std::vector<std::vector<DeviceTensorCount>> devices;
  for (const HeartbeatRecord& hb : servers) devices.push_back(ByDevice(hb));
  for (const ByDeviceGauge& g : by_device) {
    out << "# HELP " << g.name << " " << g.help << "\n# TYPE " << g.name << " gauge\n";
    for (size_t i = 0; i < servers.size(); ++i) {
      const std::string labels = ServerLabels(servers[i]);
      if (devices[i].empty()) out << g.name << "{" << labels << "} " << servers[i].*g.total << "\n";
      for (const DeviceTensorCount& d : devices[i]) {
        out << g.name << "{" << labels << ",device=\"" << Label(d.device) << "\"} " << d.*g.field
            << "\n";
      }
    }
  }
}

// The server's own figures, one series each.
void ServerGauges(std::ostream& out, const Heartbeats& servers) {
  out << "# HELP mcd_server_start_time_seconds When the server started, in seconds since the "
         "epoch.\n# TYPE mcd_server_start_time_seconds gauge\n";
  for (const HeartbeatRecord& hb : servers) {
    out << "mcd_server_start_time_seconds{" << ServerLabels(hb) << "} "
        << SecondsText(static_cast<uint64_t>(std::max<int64_t>(hb.started_ms, 0)) * 1000) << "\n";
  }
  struct Gauge {
    const char* name;
    const char* type;
    const char* help;
    uint64_t HeartbeatRecord::*field;
  };
  const Gauge gauges[] = {
      {"mcd_pool_used_bytes", "gauge", "Bytes in use in the server's IPC pools.",
       &HeartbeatRecord::pool_used},
      {"mcd_ready_bytes", "gauge", "Bytes kept as zeroed ready blocks.",
       &HeartbeatRecord::ready_bytes},
      {"mcd_slab_bytes", "gauge", "Bytes of the slabs small tensors are carved from.",
       &HeartbeatRecord::slab_bytes},
      {"mcd_commands_ok_total", "counter", "Commands applied since the server started.",
       &HeartbeatRecord::commands_ok},
      {"mcd_commands_failed_total", "counter",
       "Commands answered with an error since the server started.",
       &HeartbeatRecord::commands_failed},
  };
  for (const Gauge& g : gauges) {
    out << "# HELP " << g.name << " " << g.help << "\n# TYPE " << g.name << " " << g.type << "\n";
    for (const HeartbeatRecord& hb : servers)
      out << g.name << "{" << ServerLabels(hb) << "} " << hb.*g.field << "\n";
  }
}

// The command latency histograms, by op, and the errors, by code.
void Commands(std::ostream& out, const Heartbeats& servers) {
  out << "# HELP mcd_command_duration_seconds Time the server took over a command, by op.\n"
         "# TYPE mcd_command_duration_seconds histogram\n";
  for (const HeartbeatRecord& hb : servers) {
    for (const auto& [op, text] : hb.latency) {
      std::string labels = ServerLabels(hb) + ",op=\"" + Label(op) + "\"";
      // "50:12,100:3,...,+Inf:0;sum_us;count": buckets not cumulative, bounds in us.
      std::istringstream parts(text);
      std::string buckets, sum, count;
      if (!std::getline(parts, buckets, ';') || !std::getline(parts, sum, ';') ||
          !std::getline(parts, count))
        continue;
      std::istringstream items(buckets);
      uint64_t cumulative = 0;
      for (std::string item; std::getline(items, item, ',');) {
        size_t colon = item.find(':');
        if (colon == std::string::npos) continue;
        std::string bound = item.substr(0, colon);
        cumulative += std::strtoull(item.c_str() + colon + 1, nullptr, 10);
        std::string le =
            bound == "+Inf" ? bound : SecondsText(std::strtoull(bound.c_str(), nullptr, 10));
        out << "mcd_command_duration_seconds_bucket{" << labels << ",le=\"" << le << "\"} "
            << cumulative << "\n";
      }
      out << "mcd_command_duration_seconds_sum{" << labels << "} "
          << SecondsText(std::strtoull(sum.c_str(), nullptr, 10)) << "\n";
      out << "mcd_command_duration_seconds_count{" << labels << "} " << count << "\n";
    }
  }
  out << "# HELP mcd_command_errors_total Commands answered with an error, by code.\n"
         "# TYPE mcd_command_errors_total counter\n";
  for (const HeartbeatRecord& hb : servers) {
    for (const auto& [code, n] : Errors(hb)) {
      out << "mcd_command_errors_total{" << ServerLabels(hb) << ",code=\"" << Label(code) << "\"} "
          << n << "\n";
    }
  }
}

std::string Prometheus(const Heartbeats& servers) {
  std::ostringstream out;
  out << "# HELP mcd_servers_live mcd-serve instances with a live heartbeat on this Redis.\n"
         "# TYPE mcd_servers_live gauge\n"
      << "mcd_servers_live " << servers.size() << "\n";
  ServerGauges(out, servers);
  TensorsByDevice(out, servers);
  Commands(out, servers);
  return out.str();
}

}  // namespace

std::string FormatServers(const std::vector<HeartbeatRecord>& servers, ServersFormat format,
                          bool headers) {
  switch (format) {
    case ServersFormat::kJson:
      return Json(servers);
    case ServersFormat::kPrometheus:
      return Prometheus(servers);
    case ServersFormat::kTable:
      break;
  }
  return Table(servers, headers);
}

}  // namespace mcd::tools
