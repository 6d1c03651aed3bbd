// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "bandwidth.h"

namespace mcd::bench {

namespace {

constexpr int kReps = 20;  // timed copies per row, after two untimed ones

// Times `copy` (enqueued on the current device's default stream) with events.
template <typename Copy>
double TimeCopy(Copy&& copy) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  copy();
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return static_cast<double>(ms) * 1000.0;
}

// GB/s counting both the read and the write, from a row's median.
double ReadWriteRate(const Row& r) {
  return 2.0 * static_cast<double>(r.bytes) / (Percentile(r.us, 0.5) * 1e-6) / 1e9;
}

void NoteRates(Row& shared, Row& local) {
  shared.note += "GB/s (read+write) " + std::to_string(ReadWriteRate(shared)) + "; " +
                 std::to_string(100.0 * ReadWriteRate(shared) / ReadWriteRate(local)) +
                 "% of local";
  local.note += "GB/s (read+write) " + std::to_string(ReadWriteRate(local));
}

struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer(int device, uint64_t bytes) {
    cudaSetDevice(device);
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
      cudaGetLastError();
      ptr = nullptr;
    } else {
      cudaMemset(ptr, 7, bytes);
    }
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// The tensor of `spec`, created and mapped here for the time of `measure`, then freed.
template <typename Measure>
Status WithSharedTensor(Client& client, const CreateSpec& spec, Measure&& measure) {
  MCD_RETURN_IF_ERROR(client.Create(spec).status());
  auto view = client.Get(spec.name);
  Status measured = view.ok() ? measure(view.value()) : view.status();
  if (view.ok()) (void)client.Release(spec.name);     // the get's reference
  Status freed = client.Release(spec.name).status();  // the create's: freed
  return measured.ok() ? freed : measured;
}

}  // namespace

Status MeasureBandwidth(Client& client, const CreateSpec& spec, const std::string& kind,
                        std::vector<Row>& rows) {
  const uint64_t bytes = ShapeBytes(spec.shape, spec.dtype).value();
  Say("bandwidth " + kind + " " + tools::HumanBytes(bytes));
  Row shared{"copy_from_mapping", kind, spec.device, bytes, {}, 0, ""};
  Row local{"copy_local", kind, spec.device, bytes, {}, 0, ""};
  MCD_RETURN_IF_ERROR(WithSharedTensor(client, spec, [&](const TensorView& view) -> Status {
    if (spec.device == kHostDevice) {
      std::vector<char> a(bytes, 1), b(bytes);
      std::memset(view.data, 3, bytes);  // never time on untouched pages
      for (int i = 0; i < kReps + 2; ++i) {
        auto t0 = Clock::now();
        std::memcpy(b.data(), view.data, bytes);
        auto t1 = Clock::now();
        std::memcpy(b.data(), a.data(), bytes);
        auto t2 = Clock::now();
        if (i >= 2) {
          shared.us.push_back(Us(t0, t1));
          local.us.push_back(Us(t1, t2));
        }
      }
      return Status::Ok();
    }
    DeviceBuffer src(spec.device, bytes), dst(spec.device, bytes);
    if (!src.ptr || !dst.ptr) return Status(ErrorCode::kOutOfMemory, "bandwidth buffers");
    cudaMemset(view.data, 5, bytes);
    for (int i = 0; i < kReps + 2; ++i) {
      double s =
          TimeCopy([&] { cudaMemcpyAsync(dst.ptr, view.data, bytes, cudaMemcpyDeviceToDevice); });
      double l =
          TimeCopy([&] { cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice); });
      if (i >= 2) {
        shared.us.push_back(s);
        local.us.push_back(l);
      }
    }
    return Status::Ok();
  }));
  NoteRates(shared, local);
  rows.push_back(std::move(shared));
  rows.push_back(std::move(local));
  return Status::Ok();
}

Status MeasureCrossDevice(Client& client, const CreateSpec& spec, const std::string& kind, int peer,
                          std::vector<Row>& rows) {
  const uint64_t bytes = ShapeBytes(spec.shape, spec.dtype).value();
  const int device = spec.device;
  Say("cross-device bandwidth " + kind + " " + tools::HumanBytes(bytes));
  int can_to = 0, can_from = 0;
  cudaDeviceCanAccessPeer(&can_to, peer, device);
  cudaDeviceCanAccessPeer(&can_from, device, peer);
  // Either may already be on (the client's lazy IPC open enables it): not an error.
  cudaSetDevice(peer);
  if (can_to) cudaDeviceEnablePeerAccess(device, 0);
  cudaSetDevice(device);
  if (can_from) cudaDeviceEnablePeerAccess(peer, 0);
  cudaGetLastError();
  const std::string where = "GPU " + std::to_string(device) + " to GPU " + std::to_string(peer) +
                            (can_to && can_from ? ", peer access on; " : ", no peer access; ");
  Row shared{"copy_cross_device", kind, device, bytes, {}, 0, "a tensor's mapping on " + where};
  Row local{
      "copy_cross_local", kind, device, bytes, {}, 0, "this process's own buffer on " + where};
  MCD_RETURN_IF_ERROR(WithSharedTensor(client, spec, [&](const TensorView& view) -> Status {
    DeviceBuffer src(device, bytes), dst(peer, bytes);
    if (!src.ptr || !dst.ptr) return Status(ErrorCode::kOutOfMemory, "cross-device buffers");
    cudaSetDevice(peer);  // the process works on the peer GPU: copies run on its stream
    for (int i = 0; i < kReps + 2; ++i) {
      double s = TimeCopy([&] { cudaMemcpyPeerAsync(dst.ptr, peer, view.data, device, bytes); });
      double l = TimeCopy([&] { cudaMemcpyPeerAsync(dst.ptr, peer, src.ptr, device, bytes); });
      if (i >= 2) {
        shared.us.push_back(s);
        local.us.push_back(l);
      }
    }
    cudaError_t err = cudaGetLastError();
    cudaSetDevice(device);
    return err == cudaSuccess ? Status::Ok()
                              : Status(ErrorCode::kCudaError, cudaGetErrorString(err));
  }));
  NoteRates(shared, local);
  rows.push_back(std::move(shared));
  rows.push_back(std::move(local));
  return Status::Ok();
}

}  // namespace mcd::bench
