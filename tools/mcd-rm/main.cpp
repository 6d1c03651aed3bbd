// mcd-rm: give back one reference to each named tensor (the delete step): the calling
// process's own when it holds one, else one bound to no process. See mcd-rm(1).
#include <iostream>

#include "flags.h"

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{"mcd-rm: drop one reference per tensor; a tensor is freed when its refcount reaches 0"};
  tools::SetupApp(app);
  app.footer(std::string("Examples:\n"
                         "  mcd-rm weights                  # the shell's reference, else an unbound one\n"
                         "  mcd-rm batch.7 --wait-free 600  # and wait until every consumer let go\n"
                         "  mcd-ls -q 'tmp.*' | xargs -r mcd-rm --ignore-missing\n\n") +
             tools::kEnvironmentFooter);
  tools::CommonFlags flags;
  tools::AddCommonFlags(app, flags);
  std::vector<std::string> names;
  bool ignore_missing = false;
  app.add_option("NAME", names, "Tensor names")->required();
  app.add_flag("--ignore-missing", ignore_missing, "A name that does not exist is not an error");
  double wait_s = -1;
  app.add_option("--wait-free", wait_s,
                 "Then wait up to SECONDS until each tensor is freed, every other holder's "
                 "reference given back too (0: without end); exit 75 when one is still held")
      ->check(CLI::Range(0.0, 1e7));
  tools::HolderFlags holder;
  tools::AddHolderFlags(app, holder, "give back",
                        "Give back only a reference bound to no process (mcd-get --detached, a "
                        "creator's)");
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  const char* tool = "mcd-rm";

  auto options = tools::MakeClientOptions(flags, true);
  if (!options.ok()) return tools::Fail(tool, options.status());
  auto holder_pid = tools::HolderPid(holder, "give back");
  if (!holder_pid.ok()) return tools::Fail(tool, holder_pid.status());
  options->holder_pid = holder_pid.value();
  auto client = tools::ConnectClient(tool, options.value(), flags.quiet);
  if (!client.ok()) return tools::Fail(tool, client.status());
  // Nothing is given back for a wait that could not run.
  if (wait_s >= 0) {
    Status can_wait = client.value()->CanWait();
    if (!can_wait.ok()) return tools::Fail(tool, can_wait);
  }
  int exit_code = 0;
  std::string json = "[";
  for (const std::string& name : names) {
    auto record = client.value()->Release(name);
    if (!record.ok()) {
      if (ignore_missing && record.status().code() == ErrorCode::kNotFound) continue;
      int rc = tools::Fail(tool, record.status());
      if (exit_code == 0) exit_code = rc;
      continue;
    }
    bool freed = record->refcount <= 0;
    if (!freed && wait_s >= 0) {
      Status waited = client.value()->WaitFreed(name, record->ctime_ms, tools::TimeoutMs(wait_s));
      if (!waited.ok()) {
        // The reference is given back: repeating the mcd-rm would give back another's.
        int rc = tools::Fail(tool, Status(waited.code(), "gave back the reference of '" + name +
                                                            "' (refcount " +
                                                            std::to_string(record->refcount) +
                                                            "), then: " + waited.message()));
        if (exit_code == 0) exit_code = rc;
        continue;
      }
      freed = true;
      record->refcount = 0;
    }
    if (flags.json) {
      if (json.size() > 1) json += ",";
      json += "{\"name\":\"" + name + "\",\"refcount\":" + std::to_string(std::max<int64_t>(0, record->refcount)) +
              ",\"freed\":" + (freed ? "true" : "false") + "}";
    } else if (!flags.quiet) {
      std::cout << tools::Escaped(name) << ": " << (freed ? "freed" : "refcount " + std::to_string(record->refcount)) << "\n";
    }
  }
  if (flags.json) std::cout << json << "]\n";
  return exit_code;
}

int main(int argc, char** argv) {
  return mcd::tools::Guarded("mcd-rm", ToolMain, argc, argv);
}
