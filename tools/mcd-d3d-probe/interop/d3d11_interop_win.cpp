// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Windows: a D3D11 <-> CUDA lifecycle owned by a GPU worker. On the GpuWorker's thread:
// a D3D11 device on the adapter whose LUID is the CUDA device's, a shareable texture exported as
// an NT handle, imported into CUDA as external memory and mapped as an array; a kernel writes it,
// D3D11 reads it back through a staging texture and every byte is checked; then the release in
// DeviceContext::Reset's order (CUDA interop, CUDA caches, D3D resources).
//
// Compiled on Windows only; Linux CI checks its syntax with mingw-w64. It has not run on a GPU.
#if defined(_WIN32)

#include <cuda_runtime_api.h>
#include <d3d11.h>
#include <dxgi1_2.h>
#include <windows.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "interop/interop.h"
#include "interop/interop_steps.h"
#include "interop/pattern.h"

namespace mcd {
namespace {

template <typename T>
void SafeRelease(T*& p) {
  if (p != nullptr) p->Release();
  p = nullptr;
}

std::string Hr(const char* what, HRESULT hr) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s: HRESULT 0x%08lx", what, static_cast<unsigned long>(hr));
  return buf;
}

class D3D11Probe {
 public:
  D3D11Probe(InteropReport& report, size_t bytes) : report_(report) {
    // A square-ish RGBA8 texture of at least `bytes`.
    width_ = 1024;
    height_ = static_cast<UINT>((bytes + width_ * 4 - 1) / (width_ * 4));
    if (height_ == 0) height_ = 1;
  }
  ~D3D11Probe() { Release(); }

  void Run(DeviceContext& ctx) {
    Status gpu = ctx.EnsureGpu();
    if (!gpu.ok()) {
      report_.reason = gpu.message();
      return;
    }
    if (!steps_.Step(
            "find the DXGI adapter with the CUDA device's LUID",
            [&] { return MatchAdapter(ctx.device()); }, true))
      return;
    report_.available = true;
    if (!steps_.Step("create a D3D11 device on that adapter", [&] { return CreateDevice(); }))
      return;
    if (!steps_.Step("create a shareable texture and its NT handle",
                     [&] { return CreateShared(); }))
      return;
    if (!steps_.Step("import it into CUDA and map its array", [&] { return Import(); })) return;
    if (!steps_.Step("a CUDA kernel writes, D3D11 reads back through staging: every byte",
                     [&] { return CudaToD3D(ctx); }))
      return;
    steps_.Step("release: CUDA interop, then D3D11 resources", [&] { return Release(); });
  }

 private:
  std::string MatchAdapter(int cuda_device) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, cuda_device) != cudaSuccess)
      return "cudaGetDeviceProperties failed";
    HRESULT hr = CreateDXGIFactory1(__uuidof(IDXGIFactory1), reinterpret_cast<void**>(&factory_));
    if (FAILED(hr)) return Hr("CreateDXGIFactory1", hr);
    for (UINT i = 0; factory_->EnumAdapters1(i, &adapter_) != DXGI_ERROR_NOT_FOUND; ++i) {
      DXGI_ADAPTER_DESC1 desc{};
      adapter_->GetDesc1(&desc);
      if (std::memcmp(&desc.AdapterLuid, prop.luid, sizeof(desc.AdapterLuid)) == 0) {
        char name[128] = {};
        WideCharToMultiByte(CP_UTF8, 0, desc.Description, -1, name, sizeof(name) - 1, nullptr,
                            nullptr);
        report_.device = name;
        return "";
      }
      SafeRelease(adapter_);
    }
    return "no DXGI adapter has the LUID of CUDA device " + std::to_string(cuda_device);
  }

  std::string CreateDevice() {
    D3D_FEATURE_LEVEL level = D3D_FEATURE_LEVEL_11_0;
    HRESULT hr = D3D11CreateDevice(adapter_, D3D_DRIVER_TYPE_UNKNOWN, nullptr, 0, &level, 1,
                                   D3D11_SDK_VERSION, &device_, nullptr, &context_);
    return FAILED(hr) ? Hr("D3D11CreateDevice", hr) : "";
  }

  std::string CreateShared() {
    D3D11_TEXTURE2D_DESC desc{};
    desc.Width = width_;
    desc.Height = height_;
    desc.MipLevels = 1;
    desc.ArraySize = 1;
    desc.Format = DXGI_FORMAT_R8G8B8A8_UNORM;
    desc.SampleDesc.Count = 1;
    desc.Usage = D3D11_USAGE_DEFAULT;
    desc.BindFlags = D3D11_BIND_SHADER_RESOURCE;
    desc.MiscFlags = D3D11_RESOURCE_MISC_SHARED | D3D11_RESOURCE_MISC_SHARED_NTHANDLE;
    HRESULT hr = device_->CreateTexture2D(&desc, nullptr, &shared_);
    if (FAILED(hr)) return Hr("CreateTexture2D(shared)", hr);
    desc.Usage = D3D11_USAGE_STAGING;
    desc.BindFlags = 0;
    desc.MiscFlags = 0;
    desc.CPUAccessFlags = D3D11_CPU_ACCESS_READ;
    hr = device_->CreateTexture2D(&desc, nullptr, &staging_);
    if (FAILED(hr)) return Hr("CreateTexture2D(staging)", hr);
    IDXGIResource1* resource = nullptr;
    hr = shared_->QueryInterface(__uuidof(IDXGIResource1), reinterpret_cast<void**>(&resource));
    if (FAILED(hr)) return Hr("QueryInterface(IDXGIResource1)", hr);
    hr = resource->CreateSharedHandle(
        nullptr, DXGI_SHARED_RESOURCE_READ | DXGI_SHARED_RESOURCE_WRITE, nullptr, &handle_);
    SafeRelease(resource);
    return FAILED(hr) ? Hr("CreateSharedHandle", hr) : "";
  }

  std::string Import() {
    cudaExternalMemoryHandleDesc desc{};
    desc.type = cudaExternalMemoryHandleTypeD3D11Resource;
    desc.handle.win32.handle = handle_;
    desc.size = static_cast<unsigned long long>(width_) * height_ * 4;
    desc.flags = cudaExternalMemoryDedicated;
    cudaError_t err = cudaImportExternalMemory(&memory_, &desc);
    if (err != cudaSuccess)
      return std::string("cudaImportExternalMemory: ") + cudaGetErrorName(err);
    cudaExternalMemoryMipmappedArrayDesc array{};
    array.formatDesc = cudaCreateChannelDesc(8, 8, 8, 8, cudaChannelFormatKindUnsigned);
    array.extent = cudaExtent{width_, height_, 0};
    array.numLevels = 1;
    err = cudaExternalMemoryGetMappedMipmappedArray(&mipmapped_, memory_, &array);
    if (err != cudaSuccess)
      return std::string("cudaExternalMemoryGetMappedMipmappedArray: ") + cudaGetErrorName(err);
    err = cudaGetMipmappedArrayLevel(&level0_, mipmapped_, 0);
    return err == cudaSuccess ? ""
                              : std::string("cudaGetMipmappedArrayLevel: ") + cudaGetErrorName(err);
  }

  std::string CudaToD3D(DeviceContext& ctx) {
    size_t row = static_cast<size_t>(width_) * 4;
    std::vector<unsigned char> pattern(row * height_);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = PatternByte(i, 0x5eed);
    // A kernel writes the texture through a surface object, then the stream is drained before
    // D3D11 touches it.
    cudaError_t err = LaunchFillPatternSurface(level0_, static_cast<int>(width_),
                                               static_cast<int>(height_), 0x5eed, ctx.stream());
    if (err != cudaSuccess) return std::string("fill kernel: ") + cudaGetErrorName(err);
    context_->CopyResource(staging_, shared_);
    D3D11_MAPPED_SUBRESOURCE mapped{};
    HRESULT hr = context_->Map(staging_, 0, D3D11_MAP_READ, 0, &mapped);
    if (FAILED(hr)) return Hr("Map(staging)", hr);
    std::string error;
    for (UINT y = 0; y < height_ && error.empty(); ++y) {
      const unsigned char* got = static_cast<const unsigned char*>(mapped.pData) +
                                 static_cast<size_t>(y) * mapped.RowPitch;
      if (std::memcmp(got, pattern.data() + y * row, row) != 0)
        error = "row " + std::to_string(y) + " differs";
    }
    context_->Unmap(staging_, 0);
    return error;
  }

  std::string Release() {
    std::string error;
    if (mipmapped_ != nullptr && cudaFreeMipmappedArray(mipmapped_) != cudaSuccess)
      error = "cudaFreeMipmappedArray failed";
    mipmapped_ = nullptr;
    level0_ = nullptr;
    if (memory_ != nullptr && cudaDestroyExternalMemory(memory_) != cudaSuccess && error.empty()) {
      error = "cudaDestroyExternalMemory failed";
    }
    memory_ = nullptr;
    if (handle_ != nullptr) CloseHandle(handle_);
    handle_ = nullptr;
    SafeRelease(staging_);
    SafeRelease(shared_);
    SafeRelease(context_);
    SafeRelease(device_);
    SafeRelease(adapter_);
    SafeRelease(factory_);
    return error;
  }

  InteropReport& report_;
  StepRecorder steps_{report_};
  UINT width_ = 0, height_ = 0;
  IDXGIFactory1* factory_ = nullptr;
  IDXGIAdapter1* adapter_ = nullptr;
  ID3D11Device* device_ = nullptr;
  ID3D11DeviceContext* context_ = nullptr;
  ID3D11Texture2D* shared_ = nullptr;
  ID3D11Texture2D* staging_ = nullptr;
  HANDLE handle_ = nullptr;
  cudaExternalMemory_t memory_ = nullptr;
  cudaMipmappedArray_t mipmapped_ = nullptr;
  cudaArray_t level0_ = nullptr;
};

}  // namespace

InteropReport ProbeD3D11Interop(GpuWorker& worker, size_t bytes) {
  return RunProbeOnWorker<D3D11Probe>(worker, "d3d11", bytes);
}

}  // namespace mcd

#endif  // _WIN32
