#include "servers.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tool_common.h"

namespace mcd::tools {
namespace {

using Heartbeat = std::map<std::string, std::string>;

std::string Field(const Heartbeat& hb, const std::string& name) {
  auto it = hb.find(name);
  return it == hb.end() ? "" : it->second;
}

uint64_t Number(const Heartbeat& hb, const std::string& name) {
  return std::strtoull(Field(hb, name).c_str(), nullptr, 10);
}

double UptimeSeconds(const Heartbeat& hb) {
  int64_t started = static_cast<int64_t>(Number(hb, "started"));
  return started > 0 ? static_cast<double>(NowMs() - started) / 1000.0 : 0.0;
}

// Per-code error counters: the heartbeat's errors_<code> fields.
std::map<std::string, uint64_t> Errors(const Heartbeat& hb) {
  std::map<std::string, uint64_t> errors;
  for (const auto& [field, value] : hb) {
    if (field.rfind("errors_", 0) == 0) errors[field.substr(7)] = std::strtoull(value.c_str(), nullptr, 10);
  }
  return errors;
}

std::string Table(const std::vector<Heartbeat>& servers, bool headers) {
  std::vector<std::vector<std::string>> rows;
  if (headers) {
    rows.push_back({"NODE", "INSTANCE", "PID", "DEVICES", "ALLOCATOR", "COPIES", "UP", "TENSORS", "HELD", "OK", "FAILED"});
  }
  for (const Heartbeat& hb : servers) {
    std::string copies = Field(hb, "node_copies");
    if (copies == "in_place") copies = "in place";
    rows.push_back({Field(hb, "node"), Field(hb, "instance"), Field(hb, "pid"), Field(hb, "devices"),
                    Field(hb, "allocator"), copies.empty() ? "-" : copies,
                    HumanAge(static_cast<int64_t>(UptimeSeconds(hb) * 1000)),
                    std::to_string(Number(hb, "tensors")), HumanBytes(Number(hb, "tensor_bytes")),
                    std::to_string(Number(hb, "commands_ok")), std::to_string(Number(hb, "commands_failed"))});
  }
  return FormatTable(rows, TerminalWidth(), 0);
}

std::string Json(const std::vector<Heartbeat>& servers) {
  nlohmann::json out = nlohmann::json::array();
  for (const Heartbeat& hb : servers) {
    out.push_back({{"node", Field(hb, "node")},
                   {"instance", Field(hb, "instance")},
                   {"pid", Number(hb, "pid")},
                   {"devices", Field(hb, "devices")},
                   {"allocator", Field(hb, "allocator")},
                   {"node_copies", Field(hb, "node_copies")},
                   {"started_ms", Number(hb, "started")},
                   {"uptime_s", UptimeSeconds(hb)},
                   {"tensors", Number(hb, "tensors")},
                   {"tensor_bytes", Number(hb, "tensor_bytes")},
                   {"commands_ok", Number(hb, "commands_ok")},
                   {"commands_failed", Number(hb, "commands_failed")},
                   {"errors", Errors(hb)},
                   {"pool_used_bytes", Number(hb, "pool_used")},
                   {"ready_bytes", Number(hb, "ready_bytes")},
                   {"slab_bytes", Number(hb, "slab_bytes")},
                   {"queue", Field(hb, "queue")}});
  }
  return out.dump(1) + "\n";
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

std::string Prometheus(const std::vector<Heartbeat>& servers) {
  std::ostringstream out;
  out << "# HELP mcd_servers_live mcd-serve instances with a live heartbeat on this Redis.\n"
         "# TYPE mcd_servers_live gauge\n"
      << "mcd_servers_live " << servers.size() << "\n";
  struct Gauge {
    const char* name;
    const char* type;
    const char* help;
    std::string field;
  };
  const Gauge gauges[] = {
      {"mcd_server_uptime_seconds", "gauge", "Seconds since the server started.", ""},
      {"mcd_tensors", "gauge", "Tensors the server holds.", "tensors"},
      {"mcd_tensor_bytes", "gauge", "Bytes of the tensors the server holds.", "tensor_bytes"},
      {"mcd_pool_used_bytes", "gauge", "Bytes in use in the server's IPC pools.", "pool_used"},
      {"mcd_ready_bytes", "gauge", "Bytes kept as zeroed ready blocks.", "ready_bytes"},
      {"mcd_slab_bytes", "gauge", "Bytes of the slabs small tensors are carved from.", "slab_bytes"},
      {"mcd_commands_ok_total", "counter", "Commands applied since the server started.", "commands_ok"},
      {"mcd_commands_failed_total", "counter", "Commands answered with an error since the server started.",
       "commands_failed"},
  };
  for (const Gauge& g : gauges) {
    out << "# HELP " << g.name << " " << g.help << "\n# TYPE " << g.name << " " << g.type << "\n";
    for (const Heartbeat& hb : servers) {
      out << g.name << "{node=\"" << Label(Field(hb, "node")) << "\",instance=\"" << Label(Field(hb, "instance"))
          << "\"} ";
      if (g.field.empty()) {
        out << UptimeSeconds(hb) << "\n";
      } else {
        out << Number(hb, g.field) << "\n";
      }
    }
  }
  out << "# HELP mcd_command_duration_seconds Time the server took over a command, by op.\n"
         "# TYPE mcd_command_duration_seconds histogram\n";
  for (const Heartbeat& hb : servers) {
    for (const auto& [field, text] : hb) {
      if (field.rfind("latency_", 0) != 0) continue;
      std::string labels = "node=\"" + Label(Field(hb, "node")) + "\",instance=\"" +
                           Label(Field(hb, "instance")) + "\",op=\"" + Label(field.substr(8)) + "\"";
      // "50:12,100:3,...,+Inf:0;sum_us;count": buckets not cumulative, bounds in us.
      std::istringstream parts(text);
      std::string buckets, sum, count;
      if (!std::getline(parts, buckets, ';') || !std::getline(parts, sum, ';') || !std::getline(parts, count)) continue;
      std::istringstream items(buckets);
      uint64_t cumulative = 0;
      for (std::string item; std::getline(items, item, ',');) {
        size_t colon = item.find(':');
        if (colon == std::string::npos) continue;
        std::string bound = item.substr(0, colon);
        cumulative += std::strtoull(item.c_str() + colon + 1, nullptr, 10);
        std::string le = bound == "+Inf" ? bound : SecondsText(std::strtoull(bound.c_str(), nullptr, 10));
        out << "mcd_command_duration_seconds_bucket{" << labels << ",le=\"" << le << "\"} " << cumulative << "\n";
      }
      out << "mcd_command_duration_seconds_sum{" << labels << "} "
          << SecondsText(std::strtoull(sum.c_str(), nullptr, 10)) << "\n";
      out << "mcd_command_duration_seconds_count{" << labels << "} " << count << "\n";
    }
  }
  out << "# HELP mcd_command_errors_total Commands answered with an error, by code.\n"
         "# TYPE mcd_command_errors_total counter\n";
  for (const Heartbeat& hb : servers) {
    for (const auto& [code, n] : Errors(hb)) {
      out << "mcd_command_errors_total{node=\"" << Label(Field(hb, "node")) << "\",instance=\""
          << Label(Field(hb, "instance")) << "\",code=\"" << Label(code) << "\"} " << n << "\n";
    }
  }
  return out.str();
}

}  // namespace

std::string FormatServers(const std::vector<Heartbeat>& servers, ServersFormat format, bool headers) {
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
