// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "bare_floor.h"

#include "children.h"

namespace mcd::bench {

namespace {

Status Cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status(ErrorCode::kCudaError, std::string(what) + ": " + cudaGetErrorString(err));
}

std::string Hex(const void* data, size_t n) {
  return HexEncode(std::string_view(static_cast<const char*>(data), n));
}

// The export in `hex` into `out` (n bytes); false when it is not one.
bool Unhex(const std::string& hex, void* out, size_t n) {
  auto bytes = HexDecode(hex);
  if (!bytes.ok() || bytes->size() != n) return false;
  std::memcpy(out, bytes->data(), n);
  return true;
}

std::vector<std::string> BareChildArgs(const std::string& kind, int device, int pool_fd) {
  return {"--child",          "bare",       "--child-name",         kind, "--child-device",
          DeviceName(device), "--child-id", std::to_string(pool_fd)};
}

// One "open HEX" exchange with a bare child; returns the child's own open time.
Result<double> OpenInChild(Child& child, const std::string& handle) {
  std::istringstream reply(Ask(child, "open " + handle));
  std::string ok;
  double open_us = 0;
  if (!(reply >> ok >> open_us) || ok != "ok")
    return Status(ErrorCode::kInternal, "bare importer: " + reply.str());
  return open_us;
}

Status CloseInChild(Child& child) {
  std::string said = Ask(child, "close");
  return said == "closed" ? Status::Ok() : Status(ErrorCode::kInternal, "bare importer: " + said);
}

}  // namespace

Result<std::unique_ptr<BareExporter>> BareExporter::Make(const std::string& kind, int device) {
  std::unique_ptr<BareExporter> e(new BareExporter(kind == "cuda_mempool", device));
  MCD_RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "cudaSetDevice"));
  MCD_RETURN_IF_ERROR(
      Cuda(cudaStreamCreateWithFlags(&e->stream_, cudaStreamNonBlocking), "stream"));
  if (!e->pool_) return e;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  MCD_RETURN_IF_ERROR(Cuda(cudaMemPoolCreate(&e->pool_handle_, &props), "cudaMemPoolCreate"));
  int fd = -1;
  MCD_RETURN_IF_ERROR(Cuda(cudaMemPoolExportToShareableHandle(
                               &fd, e->pool_handle_, cudaMemHandleTypePosixFileDescriptor, 0),
                           "cudaMemPoolExportToShareableHandle"));
  // A copy without close-on-exec: the children started from here inherit it.
  e->pool_fd_ = fcntl(fd, F_DUPFD, 3);
  close(fd);
  if (e->pool_fd_ < 0) return Status(ErrorCode::kIoError, "cannot copy the pool's descriptor");
  return e;
}

BareExporter::~BareExporter() {
  FreeAll();
  if (pool_handle_) cudaMemPoolDestroy(pool_handle_);
  if (stream_) cudaStreamDestroy(stream_);
  if (pool_fd_ >= 0) close(pool_fd_);
}

Result<std::string> BareExporter::Allocate(uint64_t bytes) {
  MCD_RETURN_IF_ERROR(Cuda(cudaSetDevice(device_), "cudaSetDevice"));
  void* ptr = nullptr;
  if (pool_) {
    MCD_RETURN_IF_ERROR(Cuda(cudaMallocFromPoolAsync(&ptr, bytes, pool_handle_, stream_),
                             "cudaMallocFromPoolAsync"));
  } else {
    MCD_RETURN_IF_ERROR(Cuda(cudaMalloc(&ptr, bytes), "cudaMalloc"));
  }
  allocations_.push_back(ptr);
  MCD_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(ptr, 1, bytes, stream_), "cudaMemsetAsync"));
  MCD_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  if (pool_) {
    cudaMemPoolPtrExportData data{};
    MCD_RETURN_IF_ERROR(Cuda(cudaMemPoolExportPointer(&data, ptr), "cudaMemPoolExportPointer"));
    return Hex(&data, sizeof(data));
  }
  cudaIpcMemHandle_t handle{};
  MCD_RETURN_IF_ERROR(Cuda(cudaIpcGetMemHandle(&handle, ptr), "cudaIpcGetMemHandle"));
  return Hex(&handle, sizeof(handle));
}

void BareExporter::FreeAll() {
  for (void* ptr : allocations_) {
    if (pool_) {
      cudaFreeAsync(ptr, stream_);
    } else {
      cudaFree(ptr);
    }
  }
  if (pool_ && !allocations_.empty()) cudaStreamSynchronize(stream_);
  allocations_.clear();
}

Result<Row> BareShare(const Options& opt, const std::string& kind, int device, uint64_t bytes,
                      int batch) {
  Say("bare share " + kind + " " + tools::HumanBytes(bytes));
  MCD_ASSIGN_OR_RETURN(auto exporter, BareExporter::Make(kind, device));
  Row row{"share_bare",
          kind,
          device,
          bytes,
          {},
          0,
          "CUDA alone: an existing allocation's export sent over a pipe, opened, one byte read, "
          "acknowledged"};
  Child child = SpawnChild(BareChildArgs(kind, device, exporter->pool_fd()));
  if (ReadLine(child.from) != "ready") {
    WaitChild(child);
    return Status(ErrorCode::kInternal, "bare importer did not start");
  }
  // As the share_existing row: allocations made and filled a batch at a time before their
  // opens are timed, and given back (the importer's opens closed, then the allocations freed) a
  // batch at a time, outside the time.
  auto give_back = [&] {
    Status closed = CloseInChild(child);
    exporter->FreeAll();  // after the importer's closes
    return closed;
  };
  std::vector<double> open_us;
  std::vector<std::string> ready;  // exports not opened yet
  Status failed;
  auto deadline = Clock::now() + std::chrono::duration<double>(opt.max_seconds);
  for (int i = -1; failed.ok() && i < opt.iterations && Clock::now() < deadline && !Stopping();
       ++i) {
    if (ready.empty()) {
      if (i >= 0) failed = give_back();  // the batch before, all opened
      for (int j = 0; failed.ok() && j < batch && i + j < opt.iterations; ++j) {
        auto handle = exporter->Allocate(bytes);
        failed = handle.status();
        if (handle.ok()) ready.push_back(handle.value());
      }
      if (!failed.ok()) break;
    }
    auto t0 = Clock::now();
    auto opened = OpenInChild(child, ready.front());
    ready.erase(ready.begin());
    if (!opened.ok()) {
      failed = opened.status();
      break;
    }
    if (i >= 0) {  // the first open of the process is not timed: the share rows' consumer is warm
      row.us.push_back(Us(t0, Clock::now()));
      open_us.push_back(opened.value());
    }
  }
  if (failed.ok()) failed = give_back();
  WaitChild(child);  // its imports are gone before the exporter frees
  exporter->FreeAll();
  MCD_RETURN_IF_ERROR(failed);
  row.note += "; the open alone, median " + Whole(Percentile(open_us, 0.5)) + " us";
  return row;
}

Result<Row> BareFirstOpen(const Options& opt, const std::string& kind, int device, uint64_t bytes) {
  MCD_ASSIGN_OR_RETURN(auto exporter, BareExporter::Make(kind, device));
  Row row{"open_first_bare",
          kind,
          device,
          bytes,
          {},
          0,
          std::string("CUDA alone: the first open in a fresh process, context up") +
              (kind == "cuda_mempool" ? ", the pool's import included" : "") +
              "; a new allocation for each process, as get_first makes a new tensor"};
  for (int i = 0; i < opt.fresh && !Stopping(); ++i) {
    Say("bare first open " + kind + " " + tools::HumanBytes(bytes) + " " + std::to_string(i));
    MCD_ASSIGN_OR_RETURN(std::string handle, exporter->Allocate(bytes));
    Child child = SpawnChild(BareChildArgs(kind, device, exporter->pool_fd()));
    Status done = ReadLine(child.from) == "ready"
                      ? Status::Ok()
                      : Status(ErrorCode::kInternal, "bare importer did not start");
    if (done.ok()) {
      auto opened = OpenInChild(child, handle);
      done = opened.ok() ? CloseInChild(child) : opened.status();
      if (opened.ok()) row.us.push_back(opened.value());
    }
    WaitChild(child);
    exporter->FreeAll();
    MCD_RETURN_IF_ERROR(done);
  }
  return row;
}

int ChildBareImporter(const std::string& kind, int device, int pool_fd) {
  const bool pool = kind == "cuda_mempool";
  if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) return 69;
  std::printf("ready\n");
  std::fflush(stdout);
  cudaMemPool_t imported = nullptr;
  std::vector<void*> opened;
  for (std::string line = ReadLine(stdin); !line.empty(); line = ReadLine(stdin)) {
    if (line == "close") {
      for (void* ptr : opened) pool ? cudaFree(ptr) : cudaIpcCloseMemHandle(ptr);
      opened.clear();
      std::printf("closed\n");
      std::fflush(stdout);
      continue;
    }
    const std::string hex = line.substr(line.find(' ') + 1);
    void* ptr = nullptr;
    cudaError_t err = cudaSuccess;
    auto t0 = Clock::now();
    if (pool) {
      cudaMemPoolPtrExportData data{};
      if (!Unhex(hex, &data, sizeof(data))) return 64;
      if (!imported) {
        err = cudaMemPoolImportFromShareableHandle(
            &imported, reinterpret_cast<void*>(static_cast<uintptr_t>(pool_fd)),
            cudaMemHandleTypePosixFileDescriptor, 0);
      }
      if (err == cudaSuccess) err = cudaMemPoolImportPointer(&ptr, imported, &data);
    } else {
      cudaIpcMemHandle_t handle{};
      if (!Unhex(hex, &handle, sizeof(handle))) return 64;
      err = cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess);
    }
    double open_us = Us(t0, Clock::now());
    char byte = 0;
    if (err == cudaSuccess) err = cudaMemcpy(&byte, ptr, 1, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) {
      std::printf("%s\n", cudaGetErrorString(err));
    } else {
      opened.push_back(ptr);
      std::printf("ok %.3f\n", open_us);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace mcd::bench
