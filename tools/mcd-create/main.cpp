// mcd-create: create a named tensor through mcd-serve. See mcd-create(1).
#include <unistd.h>

#include <iostream>

#include "flags.h"
#include "npy.h"

int main(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{"mcd-create: create a named tensor (GPU memory shared through CUDA IPC, or host memory)"};
  tools::SetupApp(app);
  app.footer(std::string("Examples:\n"
                         "  mcd-create weights --dtype f32 --shape 1024,1024 --device 0\n"
                         "  mcd-create scratch --dtype u8 --shape 4096 --device cpu --lifetime stack --owner-pid $$\n"
                         "  mcd-create table --from table.npy --device 0\n\n") +
             tools::kEnvironmentFooter);
  tools::CommonFlags flags;
  tools::AddCommonFlags(app, flags);
  std::string name, dtype_text, shape_text, device_text = "0", lifetime = "heap", init = "zero", from;
  int64_t owner_pid = 0;
  app.add_option("NAME", name, "Tensor name: letters, digits and . _ : / @ + = , -")->required();
  app.add_option("--dtype", dtype_text, DTypeNames());
  app.add_option("--shape", shape_text, "Dimensions, e.g. 2,3,4");
  app.add_option("--device", device_text, "GPU ordinal or cpu")->capture_default_str();
  app.add_option("--lifetime", lifetime, "heap (until refcount 0) or stack (until the owner exits)")
      ->check(CLI::IsMember({"heap", "stack"}))
      ->capture_default_str();
  app.add_option("--owner-pid", owner_pid, "Stack tensors: the process they are bound to (default: this tool's parent)");
  app.add_option("--init", init, "zero, or none to skip zeroing")
      ->check(CLI::IsMember({"zero", "none"}))
      ->capture_default_str();
  app.add_option("--from", from, "Load a NumPy .npy file (its dtype and shape) into the new tensor");
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  const char* tool = "mcd-create";

  CreateSpec spec;
  spec.name = name;
  tools::NpyArray npy;
  if (!from.empty()) {
    if (!dtype_text.empty() || !shape_text.empty()) {
      return tools::Fail(tool, Status(ErrorCode::kInvalidArgument, "--from takes dtype and shape from the file; drop --dtype/--shape"));
    }
    auto loaded = tools::ReadNpy(from);
    if (!loaded.ok()) return tools::Fail(tool, loaded.status());
    npy = std::move(loaded).value();
    spec.dtype = npy.dtype;
    spec.shape = npy.shape;
  } else {
    if (dtype_text.empty() || shape_text.empty()) {
      return tools::Fail(tool, Status(ErrorCode::kInvalidArgument, "--dtype and --shape are required (or --from FILE.npy)"));
    }
    auto dtype = ParseDType(dtype_text);
    if (!dtype) return tools::Fail(tool, Status(ErrorCode::kInvalidArgument, "unknown dtype '" + dtype_text + "' (expected " + DTypeNames() + ")"));
    spec.dtype = *dtype;
    auto shape = ParseShapeList(shape_text);
    if (!shape.ok()) return tools::Fail(tool, shape.status());
    spec.shape = shape.value();
  }
  spec.zero_init = init == "zero";
  auto device = ParseDevice(device_text);
  if (!device.ok()) return tools::Fail(tool, device.status());
  spec.device = device.value();
  spec.lifetime = lifetime == "stack" ? Lifetime::kStack : Lifetime::kHeap;
  if (spec.lifetime == Lifetime::kStack) {
    // This tool exits at once: by default bind the tensor to the shell or script that ran it.
    spec.owner_pid = owner_pid != 0 ? owner_pid : static_cast<int64_t>(getppid());
  } else if (owner_pid != 0) {
    return tools::Fail(tool, Status(ErrorCode::kInvalidArgument, "--owner-pid is for --lifetime stack"));
  }
  if (auto bytes = ShapeBytes(spec.shape, spec.dtype); !bytes.ok()) return tools::Fail(tool, bytes.status());

  auto options = tools::MakeClientOptions(flags, true);
  if (!options.ok()) return tools::Fail(tool, options.status());
  auto client = Client::Connect(options.value());
  if (!client.ok()) return tools::Fail(tool, client.status());
  auto record = client.value()->Create(spec);
  if (!record.ok()) return tools::Fail(tool, record.status());

  if (!from.empty()) {
    auto view = client.value()->Open(name);
    Status copied = view.ok() ? client.value()->CopyFromHost(view.value(), npy.data.data(), npy.data.size())
                              : view.status();
    (void)client.value()->Close(name);
    if (!copied.ok()) {
      (void)client.value()->Release(name);  // do not leave a tensor without its contents
      return tools::Fail(tool, copied);
    }
  }
  if (flags.json) {
    std::cout << RecordToJson(record.value()) << "\n";
  } else if (!flags.quiet) {
    const TensorRecord& r = record.value();
    std::cout << "created " << r.name << " " << DTypeName(r.dtype) << "[" << tools::ShapeText(r.shape)
              << "] on " << (r.device == kHostDevice ? "cpu" : "device " + std::to_string(r.device))
              << " (" << tools::HumanBytes(r.bytes) << ", " << IpcKindName(r.ipc_kind) << ")\n";
  }
  return 0;
}
