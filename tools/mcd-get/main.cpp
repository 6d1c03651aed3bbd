// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// mcd-get: take a reference to a tensor, open it in this process, print its record and
// optionally its contents. See mcd-get(1).
#include <algorithm>
#include <csignal>
#include <iostream>
#include <map>
#include <optional>

#include "flags.h"
#include "npy.h"

namespace {

void PrintRecord(const mcd::TensorRecord& r) {
  using namespace mcd;
  // The strings are the hash's, as anyone with Redis credentials wrote them.
  std::cout << "name:      " << tools::Escaped(r.name) << "\n"
            << "dtype:     " << DTypeName(r.dtype) << "\n"
            << "shape:     " << ShapeToJson(r.shape) << "\n"
            << "device:    " << DeviceName(r.device) << "\n"
            << "bytes:     " << r.bytes << " (" << tools::HumanBytes(r.bytes) << ")\n"
            << "refcount:  " << r.refcount << "\n"
            << "state:     " << tools::Escaped(r.state) << "\n"
            << "lifetime:  " << LifetimeName(r.lifetime) << "\n"
            << "ipc_kind:  " << IpcKindName(r.ipc_kind) << "\n"
            << "node:      " << tools::Escaped(r.node) << "\n"
            << "owner:     " << tools::Escaped(r.owner) << "\n";
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct GetFlags {
  mcd::tools::CommonFlags common;
  mcd::tools::HolderFlags holder;
  std::vector<std::string> names;
  std::string output;
  bool no_ref = false;
  uint64_t print_count = 0;
  double wait_s = -1;  // --wait; < 0: none
};

void AddFlags(CLI::App& app, GetFlags& f) {
  using namespace mcd;
  tools::SetupApp(app);
  app.footer(std::string("Examples:\n"
                         "  mcd-get weights                 # refcount+1, print the record\n"
                         "  mcd-get weights --no-ref --print 8\n"
                         "  mcd-get weights --no-ref -o weights.npy\n"
                         "  mcd-get weights --detached      # a reference that outlives the shell\n"
                         "  mcd-get batch.7 --wait 60 -q    # once the producer has made it\n"
                         "  mcd-get w.0 w.1 w.2 --json      # three references, all or none\n"
                         "  mcd-get llama/                  # every member of tensor set llama\n"
                         "  mcd-get llama/ -o out.safetensors\n"
                         "A reference is the calling shell's (or --owner-pid's): mcd-rm from it\n"
                         "gives it back, and the server does when that process exits.\n\n") +
             tools::kEnvironmentFooter);
  tools::AddCommonFlags(app, f.common);
  app.add_option("NAME", f.names,
                 "Tensor names: several are got in one Redis round trip, all or none")
      ->required();
  app.add_flag("--no-ref", f.no_ref, "Read without taking a reference (refcount unchanged)");
  tools::AddHolderFlags(app, f.holder, "take",
                        "Take a reference bound to no process: it lives until an mcd-rm gives "
                        "it back");
  app.add_option("-o,--output", f.output,
                 "Write the contents to FILE.npy (NumPy) or FILE.bin (raw); a tensor set "
                 "(NAME/) to FILE.safetensors");
  app.add_option("--print", f.print_count, "Print the first N values")
      ->check(CLI::NonNegativeNumber);  // "-1" would wrap to all of them
  app.add_option("--wait", f.wait_s,
                 "Wait up to SECONDS for NAME to exist and be ready (0: without end), woken by the "
                 "server's event; exit 75 when it did not")
      ->check(CLI::Range(0.0, 1e7));
}

// The client the flags ask for: bound to the holder of the reference to take, to none for a
// read (which takes none, so that a tool whose parent is gone may read). A read alone needs no
// server; a reference, or a wait for the server's events, does. A set's read (`set_read`:
// --no-ref) takes the set's reference for as long as it reads: bound to this tool, so that the
// server gives it back if the tool dies meanwhile.
mcd::Result<std::unique_ptr<mcd::Client>> Connect(const GetFlags& f, bool set_read = false) {
  using namespace mcd;
  MCD_ASSIGN_OR_RETURN(ClientOptions options,
                       tools::MakeClientOptions(f.common, !f.no_ref || f.wait_s >= 0 || set_read));
  if (set_read) {
    options.holder_pid = 0;  // this process
  } else if (f.no_ref) {
    options.holder_pid = kNoHolder;
  } else {
    MCD_ASSIGN_OR_RETURN(options.holder_pid, tools::HolderPid(f.holder, "take"));
  }
  return tools::ConnectClient("mcd-get", options, f.common.quiet);
}

// What the flags ask to have of one tensor: a wait, a reference, or a read.
mcd::Result<mcd::TensorView> OpenAsAsked(mcd::Client& client, const GetFlags& f,
                                         const std::string& name) {
  if (f.wait_s >= 0) return client.GetWhenReady(name, mcd::tools::TimeoutMs(f.wait_s), !f.no_ref);
  return f.no_ref ? client.Open(name) : client.Get(name);
}

// The same of several: references taken in one call, all or none (after waiting for each to be
// ready, with --wait: a reference is taken only once all of them are); reads one by one.
mcd::Result<std::vector<mcd::TensorView>> OpenAllAsAsked(mcd::Client& client, const GetFlags& f) {
  using namespace mcd;
  std::vector<TensorView> views;
  if (f.names.size() == 1 || f.no_ref) {
    for (const std::string& name : f.names) {
      MCD_ASSIGN_OR_RETURN(TensorView view, OpenAsAsked(client, f, name));
      views.push_back(std::move(view));
    }
    return views;
  }
  if (f.wait_s >= 0) {
    const int64_t deadline = tools::NowMs() + tools::TimeoutMs(f.wait_s);
    for (const std::string& name : f.names) {
      int left =
          f.wait_s == 0 ? -1 : static_cast<int>(std::max<int64_t>(0, deadline - tools::NowMs()));
      MCD_RETURN_IF_ERROR(client.GetWhenReady(name, left, false).status());
      (void)client.Close(name);
    }
  }
  return client.GetMany(f.names);
}

// Writes `contents` to the -o file: NumPy for a .npy name, raw bytes for .bin; `quiet`: no note.
mcd::Status WriteOutput(const std::string& output, const mcd::TensorRecord& r,
                        const std::string& contents, bool quiet) {
  using namespace mcd;
  // Past the file-size limit a write then fails (EFBIG) and is reported like a full disk,
  // instead of the signal ending the tool before it removes what it began.
  signal(SIGXFSZ, SIG_IGN);
  const bool npy = EndsWith(output, ".npy");
  MCD_RETURN_IF_ERROR(
      npy ? tools::WriteNpy(output, r.dtype, r.shape, contents.data(), contents.size())
          : tools::WriteWhole(output, {contents}));
  if (r.dtype == DType::kBF16 && npy && !quiet) {
    std::cerr << "mcd-get: note: NumPy has no bfloat16; " << tools::Escaped(output)
              << " holds the raw bits as uint16\n";
  }
  return Status::Ok();
}

// The bytes the flags ask for (all of them for -o, the first --print values else), written to
// the -o file when one is named.
mcd::Status ReadContents(mcd::Client& client, const mcd::TensorView& view, const GetFlags& f,
                         std::string& contents) {
  using namespace mcd;
  const TensorRecord& r = view.record;
  if (f.output.empty() && f.print_count == 0) return Status::Ok();
  uint64_t elements = r.bytes / DTypeSize(r.dtype);
  contents.resize(f.output.empty() ? std::min(f.print_count, elements) * DTypeSize(r.dtype)
                                   : r.bytes);
  // Without a reference (--no-ref), this also checks that the tensor was not removed meanwhile.
  MCD_RETURN_IF_ERROR(client.CopyToHost(view, contents.data(), contents.size()));
  return f.output.empty() ? Status::Ok() : WriteOutput(f.output, r, contents, f.common.quiet);
}

void PrintResult(const GetFlags& f, const mcd::TensorRecord& r, const std::string& contents) {
  using namespace mcd;
  uint64_t shown = std::min<uint64_t>(f.print_count, r.bytes / DTypeSize(r.dtype));
  if (f.common.json) {
    std::string values = "[" + tools::FormatValues(contents.data(), r.dtype, shown) + "]";
    std::cout << (f.print_count > 0 ? RecordToJson(r, "values", values) : RecordToJson(r)) << "\n";
  } else if (!f.common.quiet) {
    PrintRecord(r);
    if (f.print_count > 0) {
      std::cout << "values:    " << tools::FormatValues(contents.data(), r.dtype, shown)
                << (shown < r.bytes / DTypeSize(r.dtype) ? ",..." : "") << "\n";
    }
  }
}

// NAME/: the members of tensor set NAME, with one reference for the whole set (Client::GetSet:
// bound as any other get's, of the member first by name; given back at once with --no-ref), or
// held while -o FILE.safetensors is written.
int GetSet(const GetFlags& f, const std::string& set) {
  using namespace mcd;
  const char* tool = "mcd-get";
  if (!f.output.empty() && !EndsWith(f.output, ".safetensors")) {
    return tools::Fail(tool, Status(ErrorCode::kInvalidArgument,
                                    "-o writes a tensor set (NAME/) to a .safetensors file"));
  }
  if (f.names.size() > 1) {
    return tools::Fail(tool, Status(ErrorCode::kInvalidArgument,
                                    "a tensor set (NAME/) is got alone, not with other names"));
  }
  if (f.print_count > 0) {
    return tools::Fail(tool, Status(ErrorCode::kInvalidArgument,
                                    "--print shows one tensor; a tensor set (NAME/) is got "
                                    "without it (mcd-get NAME/MEMBER --print N shows a member)"));
  }
  if (!f.output.empty() && (f.holder.detached || f.holder.owner_pid != 0)) {
    return tools::Fail(tool, Status(ErrorCode::kInvalidArgument,
                                    "-o FILE.safetensors keeps no reference of the set (it holds "
                                    "one only while it writes): --detached and --owner-pid do "
                                    "not apply"));
  }
  auto client = Connect(f, f.no_ref || !f.output.empty());
  if (!client.ok()) return tools::Fail(tool, client.status());
  // With --wait, the set is got once it is there. -o writes what the reference holds and gives
  // it back: a file is a copy, which needs no reference after.
  std::optional<Result<std::vector<TensorView>>> views;
  if (f.wait_s >= 0) {
    views = (*client)->GetSetWhenReady(set, tools::TimeoutMs(f.wait_s));
  } else {
    views = (*client)->GetSet(set);
  }
  if (!views->ok()) return tools::Fail(tool, views->status());
  if (!f.output.empty()) {
    Status saved = (*client)->SaveSafetensors(**views, f.output);
    auto released = (*client)->ReleaseSet(**views);  // whatever happened
    if (saved.ok() && !released.ok()) saved = released.status();
    if (!saved.ok()) return tools::Fail(tool, saved);
    if (!f.common.json) {
      if (!f.common.quiet)
        std::cout << "wrote set " << tools::Escaped(set) << " to " << f.output << "\n";
      return 0;
    }
  }
  std::vector<TensorRecord> records;
  for (const TensorView& view : **views) records.push_back(view.record);
  if (f.output.empty() && f.no_ref) {
    auto released = (*client)->ReleaseSet(**views);
    if (!released.ok()) return tools::Fail(tool, released.status());
  } else if (f.output.empty()) {
    for (const TensorView& view : **views) (void)(*client)->Close(view.record.name);
  }
  // Each member's own count, read again: a set's get reads the members' fixed fields from the
  // set's record and counts its reference on the first member alone, and with -o or --no-ref
  // that reference has gone back.
  // Not read (Redis went away just now): the counts printed are the set's, and the reference
  // the tool keeps or gave back stands either way.
  auto listed = (*client)->List(set + "/*");
  std::map<std::string, int64_t> counts;
  if (listed.ok()) {
    for (const TensorRecord& r : *listed) {
      if (r.set == set) counts[r.name] = r.refcount;  // not a tensor of the name that is no member
    }
  }
  for (TensorRecord& record : records) {
    auto now = counts.find(record.name);
    if (now != counts.end()) record.refcount = now->second;
  }
  if (f.common.json) std::cout << "[";
  for (size_t i = 0; i < records.size(); ++i) {
    if (i > 0 && (f.common.json || !f.common.quiet)) std::cout << (f.common.json ? "," : "\n");
    PrintResult(f, records[i], "");
  }
  if (f.common.json) std::cout << "]\n";
  return 0;
}

}  // namespace

static int ToolMain(int argc, char** argv) {
  using namespace mcd;
  const char* tool = "mcd-get";
  CLI::App app{"mcd-get: take a reference to a tensor and open it in this process"};
  GetFlags f;
  AddFlags(app, f);
  if (int rc = tools::ParseArgs(app, argc, argv); rc >= 0) return rc;
  for (const std::string& name : f.names) {
    if (name.size() > 1 && name.back() == '/') return GetSet(f, name.substr(0, name.size() - 1));
  }
  if (!f.output.empty() && !EndsWith(f.output, ".npy") && !EndsWith(f.output, ".bin")) {
    return tools::Fail(tool,
                       Status(ErrorCode::kInvalidArgument, "-o needs a .npy or .bin file name"));
  }
  if (!f.output.empty() && f.names.size() > 1) {
    return tools::Fail(tool, Status(ErrorCode::kInvalidArgument, "-o writes one tensor"));
  }
  auto client = Connect(f);
  if (!client.ok()) return tools::Fail(tool, client.status());
  auto views = OpenAllAsAsked(**client, f);
  if (!views.ok()) return tools::Fail(tool, tools::WithSetHint(**client, f.names, views.status()));
  std::vector<std::string> contents(views->size());
  for (size_t i = 0; i < views->size(); ++i) {
    Status read = ReadContents(**client, (*views)[i], f, contents[i]);
    if (!read.ok()) {
      // A get that fails after the references were taken gives them back: nobody would
      // mcd-rm them.
      if (!f.no_ref) (void)client.value()->ReleaseMany(f.names);
      return tools::Fail(tool, read);
    }
  }
  // The mappings are this process's; the references (if taken) stay until mcd-rm.
  for (const std::string& name : f.names) (void)client.value()->Close(name);
  const bool array = f.common.json && views->size() > 1;
  if (array) std::cout << "[";
  for (size_t i = 0; i < views->size(); ++i) {
    if (i > 0 && (array || !f.common.quiet)) std::cout << (array ? "," : "\n");
    PrintResult(f, (*views)[i].record, contents[i]);
  }
  if (array) std::cout << "]\n";
  return 0;
}

int main(int argc, char** argv) { return mcd::tools::Guarded("mcd-get", ToolMain, argc, argv); }
