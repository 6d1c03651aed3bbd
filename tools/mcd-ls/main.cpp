// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-ls: list tensors from their Redis hashes (SCAN, never KEYS). See mcd-ls(1).
#include <algorithm>
#include <iostream>
#include <iterator>
#include <map>

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
  std::string sort = "name";
  bool reverse = false;
  std::string columns;  // "": the default ones (with -l, the long ones)
  tools::WatchOptions watch;
};

// A column of the tensor table: its name for --columns, its header, and its value of a record
// (`exact`: -l, bytes as a number). The first nine are the table's default; -l adds the rest.
struct Column {
  const char* name;
  const char* header;
  std::string (*value)(const TensorRecord& r, int64_t now_ms, bool exact);
};
const Column kColumns[] = {
    {"name", "NAME", [](const TensorRecord& r, int64_t, bool) -> std::string { return r.name; }},
    {"dtype", "DTYPE",
     [](const TensorRecord& r, int64_t, bool) -> std::string { return DTypeName(r.dtype); }},
    {"shape", "SHAPE",
     [](const TensorRecord& r, int64_t, bool) -> std::string { return tools::ShapeText(r.shape); }},
    {"device", "DEVICE",
     [](const TensorRecord& r, int64_t, bool) -> std::string { return DeviceName(r.device); }},
    {"bytes", "BYTES",
     [](const TensorRecord& r, int64_t, bool exact) -> std::string {
       return exact ? std::to_string(r.bytes) : tools::HumanBytes(r.bytes);
     }},
    {"refs", "REFS",
     [](const TensorRecord& r, int64_t, bool) -> std::string {
       return std::to_string(r.refcount);
     }},
    {"state", "STATE", [](const TensorRecord& r, int64_t, bool) -> std::string { return r.state; }},
    {"age", "AGE",
     [](const TensorRecord& r, int64_t now, bool) -> std::string {
       return tools::HumanAge(now - r.ctime_ms);
     }},
    {"node", "NODE", [](const TensorRecord& r, int64_t, bool) -> std::string { return r.node; }},
    {"lifetime", "LIFETIME",
     [](const TensorRecord& r, int64_t, bool) -> std::string { return LifetimeName(r.lifetime); }},
    {"ipc", "IPC",
     [](const TensorRecord& r, int64_t, bool) -> std::string { return IpcKindName(r.ipc_kind); }},
    {"pid", "PID",
     [](const TensorRecord& r, int64_t, bool) -> std::string {
       return std::to_string(r.lifetime == Lifetime::kStack ? r.owner_pid : r.creator_pid);
     }},
    {"holders", "HOLDERS",
     [](const TensorRecord& r, int64_t, bool) -> std::string {
       std::string holders;
       for (const Holder& h : r.holders)
         holders +=
             (holders.empty() ? "" : ",") + std::to_string(h.pid) + ":" + std::to_string(h.refs);
       return holders.empty() ? std::string("-") : holders;
     }},
};
constexpr size_t kDefaultColumns = 9;

// --sort: the keys, each comparing two records (then by name, so the order is total).
const std::map<std::string, bool (*)(const TensorRecord&, const TensorRecord&)> kSortKeys = {
    {"name", [](const TensorRecord& a, const TensorRecord& b) { return a.name < b.name; }},
    {"bytes", [](const TensorRecord& a, const TensorRecord& b) { return a.bytes < b.bytes; }},
    {"age", [](const TensorRecord& a, const TensorRecord& b) { return a.ctime_ms > b.ctime_ms; }},
    {"refs", [](const TensorRecord& a, const TensorRecord& b) { return a.refcount < b.refcount; }},
    {"device", [](const TensorRecord& a, const TensorRecord& b) { return a.device < b.device; }},
    {"state", [](const TensorRecord& a, const TensorRecord& b) { return a.state < b.state; }},
    {"node", [](const TensorRecord& a, const TensorRecord& b) { return a.node < b.node; }},
};

// The columns --columns names (comma-separated, from kColumns), or the default ones.
Result<std::vector<const Column*>> ChosenColumns(const LsFlags& f) {
  std::vector<const Column*> out;
  if (f.columns.empty()) {
    size_t n = f.long_format ? std::size(kColumns) : kDefaultColumns;
    for (size_t i = 0; i < n; ++i) out.push_back(&kColumns[i]);
    return out;
  }
  for (const std::string& name : tools::SplitList(f.columns)) {
    auto known = std::find_if(std::begin(kColumns), std::end(kColumns),
                              [&](const Column& c) { return name == c.name; });
    if (known == std::end(kColumns)) {
      std::string all;
      for (const Column& c : kColumns) all += std::string(all.empty() ? "" : ",") + c.name;
      return Status(ErrorCode::kInvalidArgument,
                    "--columns: no column '" + name + "'; the columns are " + all);
    }
    out.push_back(known);
  }
  return out;
}

void AddFlags(CLI::App& app, LsFlags& f) {
  app.footer(
      std::string("Examples:\n"
                  "  mcd-ls                  # table of every tensor\n"
                  "  mcd-ls 'layer*' -l      # more columns, exact bytes\n"
                  "  mcd-ls llama/            # the members of tensor set llama\n"
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
  app.add_flag("--json", f.json, "A JSON array of records (one line)")->excludes("--quiet");
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
  std::string keys;
  for (const auto& [key, less] : kSortKeys) keys += (keys.empty() ? "" : ", ") + key;
  app.add_option("--sort", f.sort, "Order tensors by " + keys + " (age: newest first)")
      ->check(CLI::IsMember(kSortKeys))
      ->excludes("--servers")
      ->excludes("--watch")
      ->capture_default_str();
  app.add_flag("-r,--reverse", f.reverse, "Reverse the order")
      ->excludes("--servers")
      ->excludes("--watch");
  app.add_option("-o,--columns", f.columns,
                 "The table's columns, comma-separated: name, dtype, shape, device, bytes, refs, "
                 "state, age, node, lifetime, ipc, pid, holders")
      ->excludes("--json")
      ->excludes("--quiet")
      ->excludes("--servers")
      ->excludes("--watch");
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

// The records as a JSON array or as the table (-l: its long columns and exact bytes; --columns:
// those named), in the order of --sort.
void SortRecords(const LsFlags& f, std::vector<TensorRecord>& records) {
  auto less = kSortKeys.at(f.sort);
  std::sort(records.begin(), records.end(), [&](const TensorRecord& a, const TensorRecord& b) {
    if (less(a, b) || less(b, a)) return f.reverse ? less(b, a) : less(a, b);
    return f.reverse ? b.name < a.name : a.name < b.name;
  });
}

Result<std::string> FormatRecords(const LsFlags& f, const std::vector<TensorRecord>& records) {
  if (f.json) {
    std::string out = "[";
    for (const TensorRecord& r : records) out += (out.size() > 1 ? "," : "") + RecordToJson(r);
    return out + "]\n";
  }
  MCD_ASSIGN_OR_RETURN(std::vector<const Column*> columns, ChosenColumns(f));
  std::vector<std::vector<std::string>> rows;
  if (!f.no_headers) {
    rows.emplace_back();
    for (const Column* c : columns) rows.back().push_back(c->header);
  }
  int64_t now = tools::NowMs();
  for (const TensorRecord& r : records) {
    rows.emplace_back();
    for (const Column* c : columns) rows.back().push_back(c->value(r, now, f.long_format));
  }
  return tools::FormatTable(rows, tools::TerminalWidth(), 0);
}

// The tensors matching the glob (and --node): names only with -q, else records.
// A pattern without wildcards that lists nothing may be a tensor set's name, whose members are
// listed as NAME/: said on standard error.
void NoteASet(Client& client, const std::string& glob) {
  if (glob.find_first_of("*?[\\") != std::string::npos || glob.back() == '/') return;
  std::string hint = tools::SetHint(client, glob);
  if (!hint.empty()) std::cerr << kTool << ": note: " << tools::Escaped(hint) << "\n";
}

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
  // Names only, in name order: read without the records.
  if (f.names_only && only_node.empty() && f.sort == "name" && !f.reverse) {
    auto names = client.ListNames(f.glob);
    if (!names.ok()) return tools::Fail(kTool, names.status());
    for (const std::string& name : names.value()) out += tools::Escaped(name) + "\n";
    std::cout << out;
    if (names->empty()) NoteASet(client, f.glob);
    return 0;
  }
  std::vector<std::string> unreadable;
  const bool holders = f.long_format || f.json || f.columns.find("holders") != std::string::npos;
  auto records = client.List(f.glob, &unreadable, holders);
  if (!records.ok()) return tools::Fail(kTool, records.status());
  auto& all = records.value();
  if (!only_node.empty()) {
    all.erase(std::remove_if(all.begin(), all.end(),
                             [&](const TensorRecord& r) { return r.node != only_node; }),
              all.end());
  }
  SortRecords(f, all);
  if (all.empty()) NoteASet(client, f.glob);
  if (f.names_only) {
    for (const TensorRecord& r : all) out += tools::Escaped(r.name) + "\n";
    std::cout << out;
    return 0;
  }
  WarnUnreadable(unreadable);
  auto table = FormatRecords(f, all);
  if (!table.ok()) return tools::Fail(kTool, table.status());
  std::cout << table.value();
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
  // A usage error is said before anything is asked of Redis.
  if (auto columns = ChosenColumns(flags); !columns.ok())
    return tools::Fail(kTool, columns.status());
  // Every node's tensors are listed; --node (the flag, not MCD_NODE) keeps one node's.
  const std::string only_node = flags.common.node;
  auto options = tools::MakeClientOptions(flags.common, false);
  if (!options.ok()) return tools::Fail(kTool, options.status());
  if (flags.watching) {
    // A set's members by their names (SET/*): events carry no set.
    flags.watch.glob = flags.glob;
    if (!flags.glob.empty() && flags.glob.back() == '/') flags.watch.glob += '*';
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
