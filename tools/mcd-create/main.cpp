// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-create: create a named tensor through mcd-serve. See mcd-create(1).
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "flags.h"
#include "npy.h"

namespace mcd {
namespace {

struct CreateFlags {
  tools::CommonFlags common;
  std::string name, dtype, shape, device = "0", lifetime = "heap", init = "zero", from, copy_of,
                                  members;
  int64_t owner_pid = 0;
  bool timeout_given = false;  // --timeout-ms on the command line
};

void AddFlags(CLI::App& app, CreateFlags& f) {
  app.footer(
      std::string(
          "Examples:\n"
          "  mcd-create weights --dtype f32 --shape 1024,1024 --device 0\n"
          "  mcd-create scratch --dtype u8 --shape 4096 --device cpu --lifetime "
          "stack --owner-pid $$\n"
          "  mcd-create table --from table.npy --device 0\n"
          "  mcd-create llama --from model.safetensors --device 0  # a tensor set\n"
          "  mcd-create batch --members list.txt --device 0        # one from a list\n"
          "  mcd-create weights.local --copy-of weights --device 0  # from another node\n\n") +
      tools::kEnvironmentFooter);
  tools::AddCommonFlags(app, f.common);
  app.add_option("NAME", f.name, "Tensor name: letters, digits and . _ : / @ + = , -")->required();
  app.add_option("--dtype", f.dtype, DTypeNames());
  app.add_option("--shape", f.shape, "Dimensions, e.g. 2,3,4");
  app.add_option("--device", f.device, "GPU ordinal or cpu")->capture_default_str();
  app.add_option("--lifetime", f.lifetime,
                 "heap (until refcount 0) or stack (until the owner exits)")
      ->check(CLI::IsMember({"heap", "stack"}))
      ->capture_default_str();
  app.add_option("--owner-pid", f.owner_pid,
                 "Stack tensors: the process they are bound to (default: this tool's parent; "
                 "never pid 1)");
  app.add_option("--init", f.init, "zero, or none to skip zeroing")
      ->check(CLI::IsMember({"zero", "none"}))
      ->capture_default_str();
  app.add_option("--from", f.from,
                 "Load a NumPy .npy file (its dtype and shape) into the new tensor, or a "
                 ".safetensors file into a new tensor set NAME: each of its tensors a member "
                 "NAME/<its name>, all in one allocation");
  app.add_option("--members", f.members,
                 "Create tensor set NAME from a list FILE ('-': stdin), one member a line: "
                 "MEMBER DTYPE SHAPE (e.g. 'layers.0.weight f16 4096x4096'), each a tensor "
                 "NAME/MEMBER, all in one allocation, made in one command")
      ->excludes("--from");
  app.add_option(
         "--copy-of", f.copy_of,
         "A copy of tensor OTHER of another node (its dtype, shape and bytes), moved by the "
         "two nodes' servers over UCX")
      ->excludes("--from");
}

// The create the flags ask for; with --from, `npy` holds the file's contents.
Result<CreateSpec> MakeSpec(const CreateFlags& f, tools::NpyArray& npy) {
  CreateSpec spec;
  spec.name = f.name;
  if (!f.copy_of.empty()) {
    if (!f.dtype.empty() || !f.shape.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "--copy-of takes dtype and shape from the other tensor; drop --dtype/--shape");
    }
    spec.copy_of = f.copy_of;  // dtype and shape are read from its hash once connected
  } else if (!f.from.empty()) {
    if (!f.dtype.empty() || !f.shape.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "--from takes dtype and shape from the file; drop --dtype/--shape");
    }
    MCD_ASSIGN_OR_RETURN(npy, tools::ReadNpy(f.from));
    spec.dtype = npy.dtype;
    spec.shape = npy.shape;
  } else {
    if (f.dtype.empty() || f.shape.empty()) {
      return Status(ErrorCode::kInvalidArgument,
                    "--dtype and --shape are required (or --from FILE.npy)");
    }
    auto dtype = ParseDType(f.dtype);
    if (!dtype)
      return Status(ErrorCode::kInvalidArgument,
                    "unknown dtype '" + f.dtype + "' (expected " + DTypeNames() + ")");
    spec.dtype = *dtype;
    MCD_ASSIGN_OR_RETURN(spec.shape, ParseShapeList(f.shape));
  }
  spec.zero_init = f.init == "zero";
  MCD_ASSIGN_OR_RETURN(spec.device, ParseDevice(f.device));
  spec.lifetime = f.lifetime == "stack" ? Lifetime::kStack : Lifetime::kHeap;
  if (spec.lifetime == Lifetime::kStack) {
    // This tool exits at once: by default bind the tensor to the shell or script that ran it.
    MCD_ASSIGN_OR_RETURN(spec.owner_pid,
                         tools::ProcessToBindTo(f.owner_pid, "the stack tensor",
                                                "name its owner with --owner-pid PID, or make "
                                                "a heap tensor"));
  } else if (f.owner_pid != 0) {
    return Status(ErrorCode::kInvalidArgument, "--owner-pid is for --lifetime stack");
  }
  if (spec.copy_of.empty()) MCD_RETURN_IF_ERROR(ShapeBytes(spec.shape, spec.dtype).status());
  return spec;
}

// Creates the tensor; with --from, the client fills it before it is published ready, so no
// reader ever sees it without the file's bytes, and a failed fill leaves nothing behind.
Result<TensorRecord> Create(const CreateFlags& f, CreateSpec spec, const tools::NpyArray& npy) {
  MCD_ASSIGN_OR_RETURN(ClientOptions options, tools::MakeClientOptions(f.common, true));
  MCD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                       tools::ConnectClient("mcd-create", options, f.common.quiet));
  if (!spec.copy_of.empty()) {
    MCD_ASSIGN_OR_RETURN(TensorRecord source, client->Stat(spec.copy_of));
    spec.dtype = source.dtype;
    spec.shape = source.shape;
    // Without --timeout-ms, as long as the servers may take: their wait for the other node, then
    // the bytes.
    int copy_ms = 2 * CopyFetchLimitMs(source.bytes) + 5000;
    if (!f.timeout_given && copy_ms > options.timeout_ms) {
      options.timeout_ms = copy_ms;
      MCD_ASSIGN_OR_RETURN(client, tools::ConnectClient("mcd-create", options, true));
    }
  }
  if (!f.from.empty()) {
    spec.contents = npy.data.data();
    spec.contents_bytes = npy.data.size();
  }
  return client->Create(spec);
}

bool IsSafetensors(const std::string& path) {
  constexpr std::string_view kSuffix = ".safetensors";
  return path.size() > kSuffix.size() &&
         path.compare(path.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

// The members of --members FILE: "MEMBER DTYPE SHAPE" a line; blank lines and '#' comments
// are skipped.
Result<std::vector<SetMember>> ReadMemberList(const std::string& path, const std::string& set) {
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    if (!file) return Status(ErrorCode::kIoError, "cannot read " + path);
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::vector<SetMember> members;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::string member, dtype, shape, extra;
    if (!(words >> member) || member[0] == '#') continue;
    auto where = [&] { return path + ":" + std::to_string(number) + ": "; };
    if (!(words >> dtype >> shape) || (words >> extra)) {
      return Status(ErrorCode::kInvalidArgument, where() + "expected MEMBER DTYPE SHAPE");
    }
    SetMember m;
    m.name = set + "/" + member;
    auto parsed = ParseDType(dtype);
    if (!parsed) {
      return Status(ErrorCode::kInvalidArgument,
                    where() + "unknown dtype '" + dtype + "' (expected " + DTypeNames() + ")");
    }
    m.dtype = *parsed;
    auto dims = ParseShapeList(shape);
    if (!dims.ok()) return Status(dims.status().code(), where() + dims.status().message());
    m.shape = std::move(dims).value();
    members.push_back(std::move(m));
  }
  return members;
}

// --from FILE.safetensors or --members LIST: tensor set NAME, its members the file's tensors or
// the list's.
int CreateSetFrom(const CreateFlags& f) {
  const char* tool = "mcd-create";
  if (!f.dtype.empty() || !f.shape.empty() || f.owner_pid != 0 || f.lifetime != "heap") {
    return tools::Fail(tool, Status(ErrorCode::kInvalidArgument,
                                    "a tensor set takes its members' dtypes and shapes from its "
                                    "file or list, and is a heap set: drop --dtype, --shape, "
                                    "--lifetime and --owner-pid"));
  }
  auto device = ParseDevice(f.device);
  if (!device.ok()) return tools::Fail(tool, device.status());
  CreateSetSpec spec;
  if (!f.members.empty()) {
    auto listed = ReadMemberList(f.members, f.name);
    if (!listed.ok()) return tools::Fail(tool, listed.status());
    spec.name = f.name;
    spec.members = std::move(listed).value();
    spec.device = *device;
    spec.zero_init = f.init == "zero";
  }
  auto options = tools::MakeClientOptions(f.common, true);
  if (!options.ok()) return tools::Fail(tool, options.status());
  auto client = tools::ConnectClient(tool, *options, f.common.quiet);
  if (!client.ok()) return tools::Fail(tool, client.status());
  auto members = f.members.empty() ? (*client)->LoadSafetensors(f.from, f.name, *device)
                                   : (*client)->CreateSet(spec);
  if (!members.ok()) return tools::Fail(tool, members.status());
  uint64_t bytes = 0;
  for (const TensorRecord& r : *members) bytes += r.bytes;
  if (f.common.json) {
    std::string out = "[";
    for (const TensorRecord& r : *members) out += (out.size() > 1 ? "," : "") + RecordToJson(r);
    std::cout << out << "]\n";
  } else if (!f.common.quiet) {
    const TensorRecord& r = members->front();
    std::cout << "created set " << tools::Escaped(f.name) << ": " << members->size()
              << (members->size() == 1 ? " tensor " : " tensors ") << tools::Escaped(f.name)
              << "/... on "
              << (r.device == kHostDevice ? "cpu" : "device " + std::to_string(r.device)) << " ("
              << tools::HumanBytes(bytes) << " of tensors in one allocation, "
              << IpcKindName(r.ipc_kind) << ")\n";
  }
  return 0;
}

}  // namespace
}  // namespace mcd

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  CLI::App app{
      "mcd-create: create a named tensor (GPU memory shared through CUDA IPC, or host memory)"};
  tools::SetupApp(app);
  CreateFlags flags;
  AddFlags(app, flags);
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  flags.timeout_given = app.count("--timeout-ms") > 0;
  if (IsSafetensors(flags.from) || !flags.members.empty()) return CreateSetFrom(flags);
  tools::NpyArray npy;
  auto spec = MakeSpec(flags, npy);
  if (!spec.ok()) return tools::Fail("mcd-create", spec.status());
  auto record = Create(flags, spec.value(), npy);
  if (!record.ok()) return tools::Fail("mcd-create", record.status());
  const TensorRecord& r = record.value();
  if (flags.common.json) {
    std::cout << RecordToJson(r) << "\n";
  } else if (!flags.common.quiet) {
    std::cout << "created " << tools::Escaped(r.name) << " " << DTypeName(r.dtype) << "["
              << tools::ShapeText(r.shape) << "] on "
              << (r.device == kHostDevice ? "cpu" : "device " + std::to_string(r.device)) << " ("
              << tools::HumanBytes(r.bytes) << ", " << IpcKindName(r.ipc_kind) << ")\n";
  }
  return 0;
}

int main(int argc, char** argv) { return mcd::tools::Guarded("mcd-create", ToolMain, argc, argv); }
