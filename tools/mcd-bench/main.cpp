// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-bench: measures the lifecycle against a live mcd-serve, or against private ones it starts
// (--self-serve), in one run: the Redis round trip (the floor), create / get / delete per
// allocator and size, the first get in a fresh process, the end-to-end share between two
// processes, throughput with N client processes, and copy bandwidth through a shared mapping
// against a local copy. See mcd-bench(1).
#include "bare_floor.h"
#include "bench.h"
#include "children.h"
#include "flags.h"
#include "memcuda/polling.h"
#include "report.h"
#include "self_serve.h"

namespace mcd::bench {
namespace {

// The flags as given; the hidden --child ones run this binary as one of its own children.
struct BenchFlags {
  Options opt;
  std::string sizes = "4KiB,1MiB,64MiB,1GiB", clients = "8", serve_args;
  bool json_out = false, cpu_only = false;
  std::string child, child_name, child_device = "0";
  uint64_t child_bytes = 0;
  double child_seconds = 0;
  int child_id = 0;
};

void AddFlags(CLI::App& app, BenchFlags& f) {
  app.footer(
      std::string(
          "Examples:\n"
          "  mcd-bench --self-serve                      # private Redis + servers, every "
          "allocator\n"
          "  mcd-bench --sizes 4KiB,1MiB --json > run.json  # against the live mcd-serve\n\n") +
      tools::kEnvironmentFooter);
  Options& opt = f.opt;
  tools::AddConnectionFlags(app, opt.flags);
  app.add_option("--timeout-ms", opt.flags.timeout_ms, "Per request")->capture_default_str();
  app.add_option("--sizes", f.sizes, "Tensor sizes")->capture_default_str();
  app.add_option("--iterations", opt.iterations, "Operations per row (at most)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--max-seconds", opt.max_seconds, "Time bound per row")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--clients", f.clients,
                 "Client processes for the throughput row; a list (1,2,4,8) gives a row per count")
      ->capture_default_str();
  app.add_option("--fresh", opt.fresh, "Fresh processes for the first-get row")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_flag("--self-serve", opt.self_serve,
               "Start a private Redis and an mcd-serve per allocator");
  app.add_option("--serve-args", f.serve_args,
                 "With --self-serve: more arguments for each mcd-serve it starts, split at spaces "
                 "(\"--slab-max 0\", say)");
  app.add_option("--device", opt.device,
                 "The GPU the rows run on; on a host with two GPUs or more, the cross-device row "
                 "reads a tensor on it from the next one (0 reads from 1)")
      ->check(CLI::Range(0, 1023))
      ->capture_default_str();
  app.add_flag("--cpu", f.cpu_only, "Host memory only, even on a GPU machine");
  app.add_option("--only", opt.only, "Allocators to run: cuda_ipc,cuda_mempool,host_shm");
  app.add_flag("--json", f.json_out, "Print the JSON record instead of the table");
  app.add_option("--child", f.child)->group("");
  app.add_option("--child-name", f.child_name)->group("");
  app.add_option("--child-device", f.child_device)->group("");
  app.add_option("--child-bytes", f.child_bytes)->group("");
  app.add_option("--child-seconds", f.child_seconds)->group("");
  app.add_option("--child-id", f.child_id)->group("");
}

int RunChild(const BenchFlags& f) {
  int device = ParseDevice(f.child_device).value();
  if (f.child == "share") return ChildShare(f.opt.flags, device);
  if (f.child == "first-get") return ChildFirstGet(f.opt.flags, device, f.child_name);
  if (f.child == "first-rtt") return ChildFirstRtt(f.opt.flags, device);
  if (f.child == "bare") return ChildBareImporter(f.child_name, device, f.child_id);
  if (f.child == "churn")
    return ChildChurn(f.opt.flags, device, f.child_bytes, f.child_seconds, f.child_id);
  return 64;
}

// --sizes, --clients and --serve-args into the options.
Status ParseLists(BenchFlags& f) {
  Options& opt = f.opt;
  for (const std::string& item : tools::SplitList(f.sizes)) {
    auto size = tools::ParseSize(item);
    if (!size.ok() || size.value() == 0) return Status(ErrorCode::kInvalidArgument, "bad --sizes");
    opt.sizes.push_back(size.value());
  }
  std::sort(opt.sizes.begin(), opt.sizes.end());
  opt.clients.clear();
  for (const std::string& item : tools::SplitList(f.clients)) {
    char* end = nullptr;
    long n = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 1 || n > kMaxClients) {
      return Status(ErrorCode::kInvalidArgument,
                    "--clients '" + f.clients + "': give counts from 1 to " +
                        std::to_string(kMaxClients) + ", separated by commas (e.g. 1,2,4,8)");
    }
    opt.clients.push_back(static_cast<int>(n));
  }
  std::istringstream words(f.serve_args);
  for (std::string word; words >> word;) opt.serve_args.push_back(word);
  if (!opt.serve_args.empty() && !opt.self_serve) {
    return Status(ErrorCode::kInvalidArgument, "--serve-args needs --self-serve");
  }
  return Status::Ok();
}

// The run's configuration, as the record states it: what was asked, the GPU and its driver, the
// polling budget, and how commands reach the server.
json Config(const Options& opt, int gpus) {
  json config = {{"sizes", opt.sizes},
                 {"iterations", opt.iterations},
                 {"max_seconds", opt.max_seconds},
                 {"clients", opt.clients},
                 {"fresh", opt.fresh},
                 {"self_serve", opt.self_serve},
                 {"host", [] {
                    char h[256] = {};
                    gethostname(h, 255);
                    return std::string(h);
                  }()}};
  config["device"] = opt.device;
  if (gpus > 0) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, opt.device);
    config["gpus"] = gpus;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    config["gpu"] = prop.name;
    config["cuda_driver"] = driver;
    config["cuda_runtime"] = runtime;
    if (std::string version = NvidiaDriverVersion(); !version.empty())
      config["nvidia_driver"] = version;
  }
  config["spin_us"] = SpinMicros();
  config["server_spin_us"] = ServerSpinMicros();
  if (!opt.serve_args.empty()) config["serve_args"] = opt.serve_args;
  config["commands_via"] = CommandsViaQueue() ? "queue" : "socket";
  return config;
}

using Plan = std::vector<std::pair<std::string, int>>;  // allocator kind, device

// The allocators to measure: with --self-serve every one this machine has, else those of the
// live server; --only narrows either.
Result<Plan> MakePlan(Options& opt, SelfServe& self, int gpus) {
  auto wanted = [&](const std::string& kind) {
    return opt.only.empty() || opt.only.find(kind) != std::string::npos;
  };
  Plan plan;
  if (opt.self_serve) {
    MCD_RETURN_IF_ERROR(self.StartRedis());
    opt.flags.redis_url = self.Url();
    if (gpus > 0 && wanted("cuda_ipc")) plan.emplace_back("cuda_ipc", opt.device);
    if (gpus > 0 && wanted("cuda_mempool")) plan.emplace_back("cuda_mempool", opt.device);
  } else {
    auto client = ConnectOrDie(opt.flags);
    auto info = client->ServerRecord();
    std::string allocators = info.ok() ? info->allocator : "";
    auto served = [&](const char* item) { return allocators.find(item) != std::string::npos; };
    const std::string on = std::to_string(opt.device) + ":";
    if (gpus > 0 && served((on + "cuda_mempool").c_str()) && wanted("cuda_mempool"))
      plan.emplace_back("cuda_mempool", opt.device);
    if (gpus > 0 && served((on + "cuda_ipc").c_str()) && wanted("cuda_ipc"))
      plan.emplace_back("cuda_ipc", opt.device);
  }
  if (wanted("host_shm")) plan.emplace_back("host_shm", kHostDevice);
  if (plan.empty()) return Status(ErrorCode::kInvalidArgument, "nothing to measure");
  return plan;
}

// Every allocator of the plan in turn (with --self-serve, each against a server of its own),
// their rows merged into one record.
Result<json> RunPlan(const Options& opt, const Plan& plan, SelfServe& self, const json& config) {
  json merged;
  for (const auto& [kind, device] : plan) {
    tools::CommonFlags run_flags = opt.flags;
    if (opt.self_serve) {
      run_flags.node = "bench-" + kind + "-" + std::to_string(getpid());
      self.StopServer();
      MCD_RETURN_IF_ERROR(self.StartServer(kind == "cuda_mempool" ? "pool" : "cuda",
                                           DeviceName(device), run_flags.node, opt.serve_args));
    }
    MCD_ASSIGN_OR_RETURN(json part, MeasureAllocator(opt, run_flags, kind, device, config));
    if (merged.is_null()) {
      merged = part;
    } else {
      for (auto& r : part["rows"]) merged["rows"].push_back(r);
    }
  }
  return merged;
}

}  // namespace
}  // namespace mcd::bench

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  using namespace mcd::bench;
  CLI::App app{"mcd-bench: measure memcuda's lifecycle latencies, throughput and bandwidth"};
  tools::SetupApp(app);
  BenchFlags f;
  AddFlags(app, f);
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  if (!f.child.empty()) return RunChild(f);
  if (Status lists = ParseLists(f); !lists.ok()) return tools::Fail("mcd-bench", lists);
  int gpus = 0;
  if (!f.cpu_only && cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  if (gpus > 0 && f.opt.device >= gpus) {
    return tools::Fail("mcd-bench", Status(ErrorCode::kInvalidArgument,
                                           "--device " + std::to_string(f.opt.device) +
                                               ": this host has " + std::to_string(gpus) +
                                               " GPU(s), 0 to " + std::to_string(gpus - 1)));
  }
  json config = Config(f.opt, gpus);
  CatchStopSignals();
  SelfServe self;
  auto plan = MakePlan(f.opt, self, gpus);
  if (!plan.ok()) return tools::Fail("mcd-bench", plan.status());
  auto record = RunPlan(f.opt, plan.value(), self, config);
  if (Stopping()) {
    std::cerr << (Progress() ? "\r\033[K" : "") << "mcd-bench: " << StoppedBySignal().message()
              << "; the run's tensors are given back, nothing is reported\n";
    return 128 + g_stop_signal;
  }
  if (!record.ok()) return tools::Fail("mcd-bench", record.status());
  Say("");
  if (f.json_out) {
    std::cout << record.value().dump(1) << "\n";
  } else {
    PrintTable(record.value());
  }
  return 0;
}

int main(int argc, char** argv) { return mcd::tools::Guarded("mcd-bench", ToolMain, argc, argv); }
