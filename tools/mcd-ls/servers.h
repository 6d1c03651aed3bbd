// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-ls --servers: the live servers of a Redis from their heartbeats, as a table, JSON, or the
// Prometheus text format (for the node exporter's textfile collector). See mcd-ls(1).
#pragma once

#include <string>
#include <vector>

#include "memcuda/heartbeat.h"

namespace mcd::tools {

enum class ServersFormat { kTable, kJson, kPrometheus };

// What to print for `servers` (heartbeats, as Client::LiveServerRecords gives them).
std::string FormatServers(const std::vector<HeartbeatRecord>& servers, ServersFormat format,
                          bool headers);

}  // namespace mcd::tools
