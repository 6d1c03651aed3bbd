// mcd-get: take a reference to a tensor, open it in this process, print its record and
// optionally its contents. See mcd-get(1).
#include <algorithm>
#include <csignal>
#include <iostream>

#include "flags.h"
#include "npy.h"

namespace {

void PrintRecord(const mcd::TensorRecord& r) {
  using namespace mcd;
  std::cout << "name:      " << r.name << "\n"
            << "dtype:     " << DTypeName(r.dtype) << "\n"
            << "shape:     " << ShapeToJson(r.shape) << "\n"
            << "device:    " << DeviceName(r.device) << "\n"
            << "bytes:     " << r.bytes << " (" << tools::HumanBytes(r.bytes) << ")\n"
            << "refcount:  " << r.refcount << "\n"
            << "state:     " << r.state << "\n"
            << "lifetime:  " << LifetimeName(r.lifetime) << "\n"
            << "ipc_kind:  " << IpcKindName(r.ipc_kind) << "\n"
            << "node:      " << r.node << "\n"
            << "owner:     " << r.owner << "\n";
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{"mcd-get: take a reference to a tensor and open it in this process"};
  tools::SetupApp(app);
  app.footer(std::string("Examples:\n"
                         "  mcd-get weights                 # refcount+1, print the record\n"
                         "  mcd-get weights --no-ref --print 8\n"
                         "  mcd-get weights --no-ref -o weights.npy\n"
                         "  mcd-get weights --detached      # a reference that outlives the shell\n"
                         "  mcd-get batch.7 --wait 60 -q    # once the producer has made it\n"
                         "A reference is the calling shell's (or --owner-pid's): mcd-rm from it\n"
                         "gives it back, and the server does when that process exits.\n\n") +
             tools::kEnvironmentFooter);
  tools::CommonFlags flags;
  tools::AddCommonFlags(app, flags);
  std::string name, output;
  bool no_ref = false;
  uint64_t print_count = 0;
  app.add_option("NAME", name, "Tensor name")->required();
  app.add_flag("--no-ref", no_ref, "Read without taking a reference (refcount unchanged)");
  tools::HolderFlags holder;
  tools::AddHolderFlags(app, holder, "take",
                        "Take a reference bound to no process: it lives until an mcd-rm gives "
                        "it back");
  app.add_option("-o,--output", output, "Write the contents to FILE.npy (NumPy) or FILE.bin (raw)");
  app.add_option("--print", print_count, "Print the first N values");
  double wait_s = -1;
  app.add_option("--wait", wait_s,
                 "Wait up to SECONDS for NAME to exist and be ready (0: without end), woken by the "
                 "server's event; exit 75 when it did not")
      ->check(CLI::Range(0.0, 1e7));
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  const char* tool = "mcd-get";
  if (!output.empty() && !EndsWith(output, ".npy") && !EndsWith(output, ".bin")) {
    return tools::Fail(tool, Status(ErrorCode::kInvalidArgument, "-o needs a .npy or .bin file name"));
  }

  // A read alone needs no server; a reference, or a wait for the server's events, does.
  auto options = tools::MakeClientOptions(flags, !no_ref || wait_s >= 0);
  if (!options.ok()) return tools::Fail(tool, options.status());
  if (no_ref) {
    options->holder_pid = kNoHolder;  // takes none: a tool whose parent is gone may read
  } else {
    auto holder_pid = tools::HolderPid(holder, "take");
    if (!holder_pid.ok()) return tools::Fail(tool, holder_pid.status());
    options->holder_pid = holder_pid.value();
  }
  auto client = tools::ConnectClient(tool, options.value(), flags.quiet);
  if (!client.ok()) return tools::Fail(tool, client.status());
  auto view = wait_s >= 0 ? client.value()->GetWhenReady(name, tools::TimeoutMs(wait_s), !no_ref)
              : no_ref    ? client.value()->Open(name)
                          : client.value()->Get(name);
  if (!view.ok()) return tools::Fail(tool, view.status());
  const TensorRecord& r = view->record;
  // A get that fails after the reference was taken gives it back: nobody would mcd-rm it.
  auto fail = [&](const Status& status) {
    if (!no_ref) (void)client.value()->Release(name);
    return tools::Fail(tool, status);
  };

  std::string contents;
  uint64_t elements = r.bytes / DTypeSize(r.dtype);
  if (!output.empty() || print_count > 0) {
    uint64_t want = output.empty() ? std::min(print_count, elements) * DTypeSize(r.dtype) : r.bytes;
    contents.resize(want);
    Status copied = client.value()->CopyToHost(view.value(), contents.data(), want);
    if (!copied.ok()) return fail(copied);
  }
  if (!output.empty()) {
    // Past the file-size limit a write then fails (EFBIG) and is reported like a full disk,
    // instead of the signal ending the tool before it removes what it began.
    signal(SIGXFSZ, SIG_IGN);
    Status written =
        EndsWith(output, ".npy")
            ? tools::WriteNpy(output, r.dtype, r.shape, contents.data(), contents.size())
            : tools::WriteWhole(output, {contents});
    if (!written.ok()) return fail(written);
    if (r.dtype == DType::kBF16 && EndsWith(output, ".npy")) {
      std::cerr << "mcd-get: note: NumPy has no bfloat16; " << output << " holds the raw bits as uint16\n";
    }
  }
  // The mapping is this process's; the reference (if taken) stays until mcd-rm.
  (void)client.value()->Close(name);

  if (flags.json) {
    std::string json = RecordToJson(r);
    if (print_count > 0) {
      json.pop_back();
      json += ",\"values\":[" + tools::FormatValues(contents.data(), r.dtype, std::min(print_count, elements)) + "]}";
    }
    std::cout << json << "\n";
  } else if (!flags.quiet) {
    PrintRecord(r);
    if (print_count > 0) {
      std::cout << "values:    " << tools::FormatValues(contents.data(), r.dtype, std::min(print_count, elements))
                << (print_count < elements ? ",..." : "") << "\n";
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  return mcd::tools::Guarded("mcd-get", ToolMain, argc, argv);
}
