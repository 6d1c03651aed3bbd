// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-rm: give back one reference to each named tensor (the delete step): the calling
// process's own when it holds one, else one bound to no process. See mcd-rm(1).
#include <iostream>

#include "flags.h"

namespace mcd {
namespace {

constexpr const char* kTool = "mcd-rm";

struct RmFlags {
  tools::CommonFlags common;
  std::vector<std::string> names;
  bool ignore_missing = false;
  double wait_s = -1;
  tools::HolderFlags holder;
};

void AddFlags(CLI::App& app, RmFlags& f) {
  app.footer(
      std::string("Examples:\n"
                  "  mcd-rm weights                  # the shell's reference, else an unbound one\n"
                  "  mcd-rm batch.7 --wait-free 600  # and wait until every consumer let go\n"
                  "  mcd-rm w.0 w.1 w.2              # three at once, all or none\n"
                  "  mcd-rm llama/                   # every member of tensor set llama\n"
                  "  mcd-ls -q 'tmp.*' | xargs -r mcd-rm --ignore-missing\n\n") +
      tools::kEnvironmentFooter);
  tools::AddCommonFlags(app, f.common);
  app.add_option("NAME", f.names,
                 "Tensor names: several are given back in one Redis round trip, all or none "
                 "(one by one with --ignore-missing)")
      ->required();
  app.add_flag("--ignore-missing", f.ignore_missing, "A name that does not exist is not an error");
  app.add_option("--wait-free", f.wait_s,
                 "Then wait up to SECONDS until each tensor is freed, every other holder's "
                 "reference given back too (0: without end); exit 75 when one is still held")
      ->check(CLI::Range(0.0, 1e7));
  tools::AddHolderFlags(app, f.holder, "give back",
                        "Give back only a reference bound to no process (mcd-get --detached, a "
                        "creator's)");
}

Result<std::unique_ptr<Client>> Connect(const RmFlags& f) {
  MCD_ASSIGN_OR_RETURN(ClientOptions options, tools::MakeClientOptions(f.common, true));
  MCD_ASSIGN_OR_RETURN(options.holder_pid, tools::HolderPid(f.holder, "give back"));
  MCD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                       tools::ConnectClient(kTool, options, f.common.quiet));
  // Nothing is given back for a wait that could not run.
  if (f.wait_s >= 0) MCD_RETURN_IF_ERROR(client->CanWait());
  return client;
}

// Reports the reference of `name` given back (then, with --wait-free, waits until the tensor is
// freed): on stdout, or appended to `json`. The exit code of a failed wait, else 0.
int Report(const RmFlags& f, Client& client, const std::string& name, TensorRecord record,
           std::string& json) {
  bool freed = record.refcount <= 0;
  if (!freed && f.wait_s >= 0) {
    Status waited = client.WaitFreed(name, record.ctime_ms, tools::TimeoutMs(f.wait_s));
    if (!waited.ok()) {
      // The reference is given back: repeating the mcd-rm would give back another's.
      return tools::Fail(
          kTool, Status(waited.code(), "gave back the reference of '" + name + "' (refcount " +
                                           std::to_string(record.refcount) +
                                           "), then: " + waited.message()));
    }
    freed = true;
    record.refcount = 0;
  }
  if (f.common.json) {
    if (json.size() > 1) json += ",";
    json += "{\"name\":\"" + name +
            "\",\"refcount\":" + std::to_string(std::max<int64_t>(0, record.refcount)) +
            ",\"freed\":" + (freed ? "true" : "false") + "}";
  } else if (!f.common.quiet) {
    std::cout << tools::Escaped(name) << ": "
              << (freed ? "freed" : "refcount " + std::to_string(record.refcount)) << "\n";
  }
  return 0;
}

// Several names without --ignore-missing: one reference of each in one call, all or none.
// Otherwise one by one, skipping (with --ignore-missing) the names that do not exist.
// NAME/ stands for every member of tensor set NAME.
int RemoveAll(const RmFlags& f, Client& client, std::string& json) {
  int exit_code = 0;
  std::vector<std::string> names;
  for (const std::string& name : f.names) {
    if (name.size() < 2 || name.back() != '/') {
      names.push_back(name);
      continue;
    }
    std::string set = name.substr(0, name.size() - 1);
    auto members = client.SetMembers(set);
    if (!members.ok()) return tools::Fail(kTool, members.status());
    if (members->empty() && !f.ignore_missing) {
      return tools::Fail(kTool, Status(ErrorCode::kNotFound, "no tensor set named '" + set + "'"));
    }
    names.insert(names.end(), members->begin(), members->end());
  }
  if (names.size() > 1 && !f.ignore_missing) {
    auto records = client.ReleaseMany(names);
    if (!records.ok())
      return tools::Fail(kTool, tools::WithSetHint(client, names, records.status()));
    for (size_t i = 0; i < names.size(); ++i) {
      int rc = Report(f, client, names[i], (*records)[i], json);
      if (exit_code == 0) exit_code = rc;
    }
    return exit_code;
  }
  for (const std::string& name : names) {
    auto record = client.Release(name);
    int rc = 0;
    if (record.ok()) {
      rc = Report(f, client, name, std::move(record).value(), json);
    } else if (!f.ignore_missing || record.status().code() != ErrorCode::kNotFound) {
      rc = tools::Fail(kTool, tools::WithSetHint(client, {name}, record.status()));
    }
    if (exit_code == 0) exit_code = rc;
  }
  return exit_code;
}

}  // namespace
}  // namespace mcd

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{
      "mcd-rm: drop one reference per tensor; a tensor is freed when its refcount reaches 0"};
  tools::SetupApp(app);
  RmFlags flags;
  AddFlags(app, flags);
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  auto client = Connect(flags);
  if (!client.ok()) return tools::Fail(kTool, client.status());
  std::string json = "[";
  int exit_code = RemoveAll(flags, *client.value(), json);
  if (flags.common.json) std::cout << json << "]\n";
  return exit_code;
}

int main(int argc, char** argv) { return mcd::tools::Guarded("mcd-rm", ToolMain, argc, argv); }
