// mcd-ls: list tensors from their Redis hashes (SCAN, never KEYS). See mcd-ls(1).
#include <algorithm>
#include <iostream>

#include "flags.h"
#include "servers.h"
#include "watch.h"

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{"mcd-ls: list named tensors"};
  tools::SetupApp(app);
  app.footer(std::string("Examples:\n"
                         "  mcd-ls                  # table of every tensor\n"
                         "  mcd-ls 'layer*' -l      # more columns, exact bytes\n"
                         "  mcd-ls -q | xargs mcd-rm\n"
                         "  mcd-ls --servers         # the live servers; exit 69 when none\n"
                         "  mcd-ls --watch 'batch.*' # events as they happen (--json: JSON lines)\n\n") +
             tools::kEnvironmentFooter);
  tools::CommonFlags flags;
  tools::AddConnectionFlags(app, flags);
  std::string glob = "*";
  bool long_format = false, names_only = false, no_headers = false, json = false;
  app.add_option("GLOB", glob, "Only names matching this Redis glob")->capture_default_str();
  app.get_option("--node")->description(
      "Only this node's tensors (and with --watch, its events); every node's by default");
  app.add_flag("-l,--long", long_format,
               "More columns: lifetime, ipc kind, owner pid, exact bytes, and the processes that "
               "hold references (PID:COUNT)");
  app.add_flag("-q,--quiet", names_only, "Names only, one per line (for xargs mcd-rm)");
  app.add_flag("--no-headers", no_headers, "Leave out the header line");
  app.add_flag("--json", json, "A JSON array of records");
  bool servers = false, prometheus = false;
  app.add_flag("--servers", servers,
               "The live servers instead (node, instance, devices, uptime, tensors, bytes, "
               "commands); exit 69 when none is live: a readiness check");
  app.add_flag("--prometheus", prometheus,
               "With --servers: the Prometheus text format (for the node exporter's textfile "
               "collector)")
      ->needs("--servers")
      ->excludes("--json");
  tools::WatchOptions watch;
  bool watching = false;
  app.add_flag("-w,--watch", watching,
               "Print each lifecycle event as it happens (create, get, release, delete, reclaim, "
               "server_start, server_stop; gap where events were trimmed before it read "
               "them) until interrupted; with --json, JSON lines")
      ->excludes("--servers");
  app.add_option("--since", watch.since,
                 "With --watch: start that far back in the kept history (30s, 5m, 2h; all), or "
                 "after an event id")
      ->needs("--watch");
  app.add_option("--count", watch.count, "With --watch: stop after N events")
      ->needs("--watch")
      ->check(CLI::PositiveNumber);
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  const char* tool = "mcd-ls";
  // Every node's tensors are listed; --node (the flag, not MCD_NODE) keeps one node's.
  const std::string only_node = flags.node;
  auto options = tools::MakeClientOptions(flags, false);
  if (!options.ok()) return tools::Fail(tool, options.status());
  if (watching) {
    watch.glob = glob;
    watch.json = json;
    watch.headers = !no_headers;
    watch.node = only_node;
    return tools::Watch(tool, options.value(), watch);
  }
  auto client = Client::Connect(options.value());
  if (!client.ok()) return tools::Fail(tool, client.status());
  if (servers) {
    std::vector<std::map<std::string, std::string>> dead;
    auto live = client.value()->LiveServers(&dead);
    if (!live.ok()) return tools::Fail(tool, live.status());
    // A killed server of this host is not live, though its heartbeat lingers until its TTL.
    for (auto& server : dead) {
      if (names_only) break;
      std::cerr << tool << ": note: the mcd-serve of node '" << tools::Escaped(server["node"])
                << "' (pid " << tools::Escaped(server["pid"])
                << ") is not running (killed or crashed); its heartbeat lingers until it expires\n";
    }
    auto format = prometheus ? tools::ServersFormat::kPrometheus
                             : json ? tools::ServersFormat::kJson : tools::ServersFormat::kTable;
    if (names_only && format == tools::ServersFormat::kTable) {
      for (auto& server : live.value()) std::cout << tools::Escaped(server["node"]) << "\n";  // nodes only
    } else if (!live->empty() || format != tools::ServersFormat::kTable) {
      std::cout << tools::FormatServers(live.value(), format, !no_headers);
    }
    if (live->empty()) {
      return tools::Fail(tool, Status(ErrorCode::kUnavailable,
                                      "no mcd-serve is live on " +
                                          client.value()->options().redis_url.Redacted()));
    }
    return 0;
  }
  if (client.value()->options().redis_url.found) {
    // The Redis was found, not named: say whose it is when this host's node has no server
    // there, rather than list another server's tensors (or none) as if they were this one's.
    auto here = client.value()->ServerInfo();
    if (!here.ok() && here.status().code() == ErrorCode::kUnavailable) {
      std::cerr << tool << ": note: " << tools::Escaped(here.status().message()) << "\n";
    }
  }
  std::string out;
  if (names_only && !json && only_node.empty()) {
    auto names = client.value()->ListNames(glob);
    if (!names.ok()) return tools::Fail(tool, names.status());
    for (const std::string& name : names.value()) out += tools::Escaped(name) + "\n";
    std::cout << out;
    return 0;
  }
  std::vector<std::string> unreadable;
  auto records = client.value()->List(glob, &unreadable, long_format || json);
  if (!records.ok()) return tools::Fail(tool, records.status());
  if (!only_node.empty()) {
    auto& all = records.value();
    all.erase(std::remove_if(all.begin(), all.end(),
                             [&](const TensorRecord& r) { return r.node != only_node; }),
              all.end());
    if (names_only && !json) {
      for (const TensorRecord& r : all) out += tools::Escaped(r.name) + "\n";
      std::cout << out;
      return 0;
    }
  }
  if (!unreadable.empty()) {
    // On stderr, so the table and the JSON stay what scripts expect; -q lists these names too.
    std::cerr << tool << ": warning: " << unreadable.size() << " key(s) under the tensor prefix hold no readable tensor:";
    for (size_t i = 0; i < unreadable.size() && i < 5; ++i) std::cerr << "\n  " << tools::Escaped(unreadable[i]);
    if (unreadable.size() > 5) std::cerr << "\n  ... and " << unreadable.size() - 5 << " more";
    std::cerr << "\n";
  }

  if (json) {
    out = "[";
    for (const TensorRecord& r : records.value()) out += (out.size() > 1 ? "," : "") + RecordToJson(r);
    out += "]\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    if (!no_headers) {
      rows.push_back({"NAME", "DTYPE", "SHAPE", "DEVICE", "BYTES", "REFS", "STATE", "AGE", "NODE"});
      if (long_format) rows.back().insert(rows.back().end(), {"LIFETIME", "IPC", "PID", "HOLDERS"});
    }
    int64_t now = tools::NowMs();
    for (const TensorRecord& r : records.value()) {
      rows.push_back({r.name, DTypeName(r.dtype), tools::ShapeText(r.shape), DeviceName(r.device),
                      long_format ? std::to_string(r.bytes) : tools::HumanBytes(r.bytes),
                      std::to_string(r.refcount), r.state, tools::HumanAge(now - r.ctime_ms), r.node});
      if (long_format) {
        int64_t pid = r.lifetime == Lifetime::kStack ? r.owner_pid : r.creator_pid;
        std::string holders;
        for (const Holder& h : r.holders)
          holders += (holders.empty() ? "" : ",") + std::to_string(h.pid) + ":" + std::to_string(h.refs);
        rows.back().insert(rows.back().end(), {LifetimeName(r.lifetime), IpcKindName(r.ipc_kind), std::to_string(pid),
                                               holders.empty() ? "-" : holders});
      }
    }
    out = tools::FormatTable(rows, tools::TerminalWidth(), 0);
  }
  std::cout << out;
  return 0;
}

int main(int argc, char** argv) {
  return mcd::tools::Guarded("mcd-ls", ToolMain, argc, argv);
}
