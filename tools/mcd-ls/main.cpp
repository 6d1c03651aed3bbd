// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-ls: list tensors from their Redis hashes (SCAN, never KEYS). See mcd-ls(1).
#include <algorithm>
#include <iostream>

#include "flags.h"
#include "servers.h"
#include "watch.h"

namespace mcd {
namespace {

constexpr const char* kTool = "mcd-ls";

struct LsFlags {
  tools::CommonFlags common;
  std::string glob = "*";
  bool long_format = false, names_only = false, no_headers = false, json = false;
  bool servers = false, prometheus = false, watching = false;
  tools::WatchOptions watch;
};

void AddFlags(CLI::App& app, LsFlags& f) {
  app.footer(
      std::string("Examples:\n"
                  "  mcd-ls                  # table of every tensor\n"
                  "  mcd-ls 'layer*' -l      # more columns, exact bytes\n"
                  "  mcd-ls -q | xargs mcd-rm\n"
                  "  mcd-ls --servers         # the live servers; exit 69 when none\n"
                  "  mcd-ls --watch 'batch.*' # events as they happen (--json: JSON lines)\n\n") +
      tools::kEnvironmentFooter);
  tools::AddConnectionFlags(app, f.common);
  app.add_option("GLOB", f.glob, "Only names matching this Redis glob")->capture_default_str();
  app.get_option("--node")->description(
      "Only this node's tensors (with --watch, its events; with --servers, its server); every "
      "node's by default");
  app.add_flag("-l,--long", f.long_format,
               "More columns: lifetime, ipc kind, owner pid, exact bytes, and the processes that "
               "hold references (PID:COUNT)");
  app.add_flag("-q,--quiet", f.names_only, "Names only, one per line (for xargs mcd-rm)");
  app.add_flag("--no-headers", f.no_headers, "Leave out the header line");
  app.add_flag("--json", f.json, "A JSON array of records");
  app.add_flag("--servers", f.servers,
               "The live servers instead (node, instance, devices, uptime, tensors, bytes, "
               "commands); exit 69 when none is live: a readiness check");
  app.add_flag("--prometheus", f.prometheus,
               "With --servers: the Prometheus text format (for the node exporter's textfile "
               "collector)")
      ->needs("--servers")
      ->excludes("--json");
  app.add_flag("-w,--watch", f.watching,
               "Print each lifecycle event as it happens (create, get, release, delete, reclaim, "
               "server_start, server_stop; gap where events were trimmed before it read "
               "them) until interrupted; with --json, JSON lines")
      ->excludes("--servers");
  app.add_option("--since", f.watch.since,
                 "With --watch: start that far back in the kept history (30s, 5m, 2h; all), or "
                 "after an event id")
      ->needs("--watch");
  app.add_option("--count", f.watch.count, "With --watch: stop after N events")
      ->needs("--watch")
      ->check(CLI::PositiveNumber);
}

// --servers: the live servers as the flags ask (with --node, that node's only); exit 69 when
// none is live.
int ListServers(const LsFlags& f, Client& client, const std::string& only_node) {
  std::vector<HeartbeatRecord> dead;
  std::vector<std::string> unreadable;
  auto live = client.LiveServerRecords(&dead, &unreadable);
  if (!live.ok()) return tools::Fail(kTool, live.status());
  if (!only_node.empty()) {
    auto other_node = [&](const HeartbeatRecord& hb) { return hb.node != only_node; };
    live->erase(std::remove_if(live->begin(), live->end(), other_node), live->end());
    dead.erase(std::remove_if(dead.begin(), dead.end(), other_node), dead.end());
  }
  // A heartbeat with a malformed field names no server this tool can list: say which and why.
  for (const std::string& why : unreadable) {
    std::cerr << kTool << ": note: unreadable heartbeat " << tools::Escaped(why) << " (left out)\n";
  }
  // A killed server of this host is not live, though its heartbeat lingers until its TTL.
  for (const HeartbeatRecord& server : dead) {
    if (f.names_only) break;
    std::cerr << kTool << ": note: the mcd-serve of node '" << tools::Escaped(server.node)
              << "' (pid " << server.pid
              << ") is not running (killed or crashed); its heartbeat lingers until it expires\n";
  }
  auto format = f.prometheus ? tools::ServersFormat::kPrometheus
                : f.json     ? tools::ServersFormat::kJson
                             : tools::ServersFormat::kTable;
  if (f.names_only && format == tools::ServersFormat::kTable) {
    for (const HeartbeatRecord& server : live.value())
      std::cout << tools::Escaped(server.node) << "\n";  // nodes only
  } else if (!live->empty() || format != tools::ServersFormat::kTable) {
    std::cout << tools::FormatServers(live.value(), format, !f.no_headers);
  }
  if (live->empty()) {
    return tools::Fail(
        kTool,
        Status(ErrorCode::kUnavailable,
               "no mcd-serve is live" + (only_node.empty() ? "" : " for node '" + only_node + "'") +
                   " on " + client.options().redis_url.Redacted()));
  }
  return 0;
}

// On stderr, so the table and the JSON stay what scripts expect; -q lists these names too.
void WarnUnreadable(const std::vector<std::string>& unreadable) {
  if (unreadable.empty()) return;
  std::cerr << kTool << ": warning: " << unreadable.size()
            << " key(s) under the tensor prefix hold no readable tensor:";
  for (size_t i = 0; i < unreadable.size() && i < 5; ++i)
    std::cerr << "\n  " << tools::Escaped(unreadable[i]);
  if (unreadable.size() > 5) std::cerr << "\n  ... and " << unreadable.size() - 5 << " more";
  std::cerr << "\n";
}

// The records as a JSON array or as the table (-l: its long columns).
std::string FormatRecords(const LsFlags& f, const std::vector<TensorRecord>& records) {
  if (f.json) {
    std::string out = "[";
    for (const TensorRecord& r : records) out += (out.size() > 1 ? "," : "") + RecordToJson(r);
    return out + "]\n";
  }
  std::vector<std::vector<std::string>> rows;
  if (!f.no_headers) {
    rows.push_back({"NAME", "DTYPE", "SHAPE", "DEVICE", "BYTES", "REFS", "STATE", "AGE", "NODE"});
    if (f.long_format) rows.back().insert(rows.back().end(), {"LIFETIME", "IPC", "PID", "HOLDERS"});
  }
  int64_t now = tools::NowMs();
  for (const TensorRecord& r : records) {
    rows.push_back({r.name, DTypeName(r.dtype), tools::ShapeText(r.shape), DeviceName(r.device),
                    f.long_format ? std::to_string(r.bytes) : tools::HumanBytes(r.bytes),
                    std::to_string(r.refcount), r.state, tools::HumanAge(now - r.ctime_ms),
                    r.node});
    if (f.long_format) {
      int64_t pid = r.lifetime == Lifetime::kStack ? r.owner_pid : r.creator_pid;
      std::string holders;
      for (const Holder& h : r.holders)
        holders +=
            (holders.empty() ? "" : ",") + std::to_string(h.pid) + ":" + std::to_string(h.refs);
      rows.back().insert(rows.back().end(), {LifetimeName(r.lifetime), IpcKindName(r.ipc_kind),
                                             std::to_string(pid), holders.empty() ? "-" : holders});
    }
  }
  return tools::FormatTable(rows, tools::TerminalWidth(), 0);
}

// The tensors matching the glob (and --node): names only with -q, else records.
int ListTensors(const LsFlags& f, Client& client, const std::string& only_node) {
  if (client.options().redis_url.found) {
    // The Redis was found, not named: say whose it is when this host's node has no server
    // there, rather than list another server's tensors (or none) as if they were this one's.
    auto here = client.ServerRecord();
    if (!here.ok() && here.status().code() == ErrorCode::kUnavailable) {
      std::cerr << kTool << ": note: " << tools::Escaped(here.status().message()) << "\n";
    }
  }
  std::string out;
  if (f.names_only && !f.json && only_node.empty()) {
    auto names = client.ListNames(f.glob);
    if (!names.ok()) return tools::Fail(kTool, names.status());
    for (const std::string& name : names.value()) out += tools::Escaped(name) + "\n";
    std::cout << out;
    return 0;
  }
  std::vector<std::string> unreadable;
  auto records = client.List(f.glob, &unreadable, f.long_format || f.json);
  if (!records.ok()) return tools::Fail(kTool, records.status());
  if (!only_node.empty()) {
    auto& all = records.value();
    all.erase(std::remove_if(all.begin(), all.end(),
                             [&](const TensorRecord& r) { return r.node != only_node; }),
              all.end());
    if (f.names_only && !f.json) {
      for (const TensorRecord& r : all) out += tools::Escaped(r.name) + "\n";
      std::cout << out;
      return 0;
    }
  }
  WarnUnreadable(unreadable);
  std::cout << FormatRecords(f, records.value());
  return 0;
}

}  // namespace
}  // namespace mcd

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{"mcd-ls: list named tensors"};
  tools::SetupApp(app);
  LsFlags flags;
  AddFlags(app, flags);
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  // Every node's tensors are listed; --node (the flag, not MCD_NODE) keeps one node's.
  const std::string only_node = flags.common.node;
  auto options = tools::MakeClientOptions(flags.common, false);
  if (!options.ok()) return tools::Fail(kTool, options.status());
  if (flags.watching) {
    flags.watch.glob = flags.glob;
    flags.watch.json = flags.json;
    flags.watch.headers = !flags.no_headers;
    flags.watch.node = only_node;
    return tools::Watch(kTool, options.value(), flags.watch);
  }
  auto client = Client::Connect(options.value());
  if (!client.ok()) return tools::Fail(kTool, client.status());
  if (flags.servers) return ListServers(flags, *client.value(), only_node);
  return ListTensors(flags, *client.value(), only_node);
}

int main(int argc, char** argv) { return mcd::tools::Guarded("mcd-ls", ToolMain, argc, argv); }
