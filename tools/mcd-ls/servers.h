// mcd-ls --servers: the live servers of a Redis from their heartbeats, as a table, JSON, or the
// Prometheus text format (for the node exporter's textfile collector). See mcd-ls(1).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace mcd::tools {

enum class ServersFormat { kTable, kJson, kPrometheus };

// What to print for `servers` (heartbeats, as Client::LiveServers gives them).
std::string FormatServers(const std::vector<std::map<std::string, std::string>>& servers,
                          ServersFormat format, bool headers);

}  // namespace mcd::tools
