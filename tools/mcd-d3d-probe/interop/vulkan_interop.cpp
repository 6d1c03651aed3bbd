// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Linux: the worker-owned interop lifecycle through Vulkan external memory. Vulkan exports a
// device-local buffer and two binary semaphores as opaque file descriptors; CUDA imports them
// (cudaImportExternalMemory, cudaExternalMemoryGetMappedBuffer, cudaImportExternalSemaphore),
// writes the buffer for Vulkan to read back and reads what Vulkan wrote, with every byte checked
// and the semaphores ordering the two queues. All of it runs as one job on the GpuWorker, whose
// thread owns the CUDA stream and the Vulkan objects; the release follows
// DeviceContext::Reset's order.
//
// The loader is opened at run time: machines without Vulkan get "unavailable", not a failed start.
#define VK_NO_PROTOTYPES
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include <chrono>
#include <cstring>
#include <functional>

#include "interop/interop.h"
#include "interop/interop_steps.h"
#include "interop/pattern.h"
#include "memcuda/unique_fd.h"

namespace mcd {
namespace {

// Every Vulkan entry point the probe uses, loaded from the loader at run time.
struct Vk {
  void* lib = nullptr;
  PFN_vkGetInstanceProcAddr GetInstanceProcAddr = nullptr;
  PFN_vkCreateInstance CreateInstance = nullptr;
  // X-macro lists, one entry a line: clang-format 14 folds them differently on each pass.
  // clang-format off
#define MCD_VK_INSTANCE_FNS(X)              \
  X(DestroyInstance)                        \
  X(EnumeratePhysicalDevices)               \
  X(GetPhysicalDeviceProperties2)           \
  X(GetPhysicalDeviceQueueFamilyProperties) \
  X(GetPhysicalDeviceMemoryProperties)      \
  X(CreateDevice)                           \
  X(GetDeviceProcAddr)                      \
  X(EnumerateDeviceExtensionProperties)
#define MCD_VK_DEVICE_FNS(X)     \
  X(DestroyDevice)               \
  X(GetDeviceQueue)              \
  X(CreateBuffer)                \
  X(DestroyBuffer)               \
  X(GetBufferMemoryRequirements) \
  X(AllocateMemory)              \
  X(FreeMemory)                  \
  X(BindBufferMemory)            \
  X(MapMemory)                   \
  X(UnmapMemory)                 \
  X(GetMemoryFdKHR)              \
  X(CreateSemaphore)             \
  X(DestroySemaphore)            \
  X(GetSemaphoreFdKHR)           \
  X(CreateCommandPool)           \
  X(DestroyCommandPool)          \
  X(AllocateCommandBuffers)      \
  X(BeginCommandBuffer)          \
  X(EndCommandBuffer)            \
  X(CmdCopyBuffer)               \
  X(QueueSubmit)                 \
  X(CreateFence)                 \
  X(DestroyFence)                \
  X(WaitForFences)               \
  X(ResetFences)                 \
  X(ResetCommandBuffer)          \
  X(DeviceWaitIdle)
  // clang-format on
#define MCD_VK_DECLARE(name) PFN_vk##name name = nullptr;
  MCD_VK_INSTANCE_FNS(MCD_VK_DECLARE)
  MCD_VK_DEVICE_FNS(MCD_VK_DECLARE)
#undef MCD_VK_DECLARE
};

std::string VkName(VkResult r) { return "VkResult " + std::to_string(static_cast<int>(r)); }

// The bytes a pattern of `seed` should hold (pattern.h: the kernels write the same).
void Pattern(std::vector<unsigned char>& out, uint32_t seed) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = PatternByte(i, seed);
}

class VulkanProbe {
 public:
  VulkanProbe(InteropReport& report, size_t bytes) : report_(report), bytes_(bytes) {}
  ~VulkanProbe() { Release(); }

  void Run(DeviceContext& ctx) {
    Status gpu = ctx.EnsureGpu();
    if (!gpu.ok()) {
      report_.reason = gpu.message();
      return;
    }
    if (!steps_.Step(
            "load the Vulkan loader", [&] { return Load(); }, /*availability=*/true))
      return;
    if (!steps_.Step(
            "create a Vulkan 1.1 instance", [&] { return CreateInstance(); }, true))
      return;
    if (!steps_.Step(
            "match the Vulkan device by UUID", [&] { return MatchDevice(ctx.device()); }, true))
      return;
    report_.available = true;
    if (!steps_.Step("create a device with external memory and semaphore (fd) support",
                     [&] { return CreateDevice(); }))
      return;
    if (!steps_.Step("allocate an exportable device-local buffer and export its fd",
                     [&] { return CreateSharedBuffer(); }))
      return;
    if (!steps_.Step("import the memory into CUDA and map it", [&] { return ImportMemory(); }))
      return;
    if (!steps_.Step("export two semaphores and import them into CUDA",
                     [&] { return ImportSemaphores(); }))
      return;
    if (!steps_.Step("a CUDA kernel writes, Vulkan reads back: every byte",
                     [&] { return CudaToVulkan(ctx); }))
      return;
    if (!steps_.Step("Vulkan writes, CUDA reads back: every byte",
                     [&] { return VulkanToCuda(ctx); }))
      return;
    steps_.Step("release: CUDA interop, then Vulkan resources", [&] { return Release(); });
  }

 private:
  std::string Load() {
    vk_.lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (vk_.lib == nullptr) return "no Vulkan loader (libvulkan.so.1) on this machine";
    vk_.GetInstanceProcAddr =
        reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(vk_.lib, "vkGetInstanceProcAddr"));
    if (vk_.GetInstanceProcAddr == nullptr) return "the Vulkan loader lacks vkGetInstanceProcAddr";
    vk_.CreateInstance = reinterpret_cast<PFN_vkCreateInstance>(
        vk_.GetInstanceProcAddr(nullptr, "vkCreateInstance"));
    return vk_.CreateInstance ? "" : "the Vulkan loader lacks vkCreateInstance";
  }

  std::string CreateInstance() {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "mcd-d3d-probe";
    app.apiVersion = VK_API_VERSION_1_1;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pApplicationInfo = &app;
    VkResult r = vk_.CreateInstance(&info, nullptr, &instance_);
    if (r != VK_SUCCESS) {
      return r == VK_ERROR_INCOMPATIBLE_DRIVER ? "no Vulkan driver (ICD) found"
                                               : "vkCreateInstance: " + VkName(r);
    }
#define MCD_VK_LOAD(name)                                                                    \
  vk_.name = reinterpret_cast<PFN_vk##name>(vk_.GetInstanceProcAddr(instance_, "vk" #name)); \
  if (vk_.name == nullptr) return "missing Vulkan function vk" #name;
    MCD_VK_INSTANCE_FNS(MCD_VK_LOAD)
    return "";
  }

  std::string MatchDevice(int cuda_device) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, cuda_device) != cudaSuccess)
      return "cudaGetDeviceProperties failed";
    uint32_t count = 0;
    vk_.EnumeratePhysicalDevices(instance_, &count, nullptr);
    std::vector<VkPhysicalDevice> devices(count);
    vk_.EnumeratePhysicalDevices(instance_, &count, devices.data());
    for (VkPhysicalDevice d : devices) {
      VkPhysicalDeviceIDProperties id{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
      VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
      props.pNext = &id;
      vk_.GetPhysicalDeviceProperties2(d, &props);
      if (std::memcmp(id.deviceUUID, prop.uuid.bytes, VK_UUID_SIZE) == 0) {
        physical_ = d;
        report_.device = props.properties.deviceName;
        return "";
      }
    }
    return "none of the " + std::to_string(count) +
           " Vulkan device(s) has the UUID of CUDA device " + std::to_string(cuda_device);
  }

  std::string CreateDevice() {
    uint32_t families = 0;
    vk_.GetPhysicalDeviceQueueFamilyProperties(physical_, &families, nullptr);
    std::vector<VkQueueFamilyProperties> props(families);
    vk_.GetPhysicalDeviceQueueFamilyProperties(physical_, &families, props.data());
    queue_family_ = UINT32_MAX;
    for (uint32_t i = 0; i < families; ++i) {
      if (props[i].queueFlags &
          (VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_COMPUTE_BIT | VK_QUEUE_TRANSFER_BIT)) {
        queue_family_ = i;
        break;
      }
    }
    if (queue_family_ == UINT32_MAX) return "no queue family can transfer";
    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    queue.queueFamilyIndex = queue_family_;
    queue.queueCount = 1;
    queue.pQueuePriorities = &priority;
    const char* extensions[] = {VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME,
                                VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME};
    VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    info.queueCreateInfoCount = 1;
    info.pQueueCreateInfos = &queue;
    info.enabledExtensionCount = 2;
    info.ppEnabledExtensionNames = extensions;
    VkResult r = vk_.CreateDevice(physical_, &info, nullptr, &device_);
    if (r != VK_SUCCESS) return "vkCreateDevice: " + VkName(r);
#define MCD_VK_LOAD_DEVICE(name)                                                         \
  vk_.name = reinterpret_cast<PFN_vk##name>(vk_.GetDeviceProcAddr(device_, "vk" #name)); \
  if (vk_.name == nullptr) return "missing Vulkan function vk" #name;
    MCD_VK_DEVICE_FNS(MCD_VK_LOAD_DEVICE)
    vk_.GetDeviceQueue(device_, queue_family_, 0, &queue_);
    VkCommandPoolCreateInfo pool{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool.queueFamilyIndex = queue_family_;
    if ((r = vk_.CreateCommandPool(device_, &pool, nullptr, &pool_)) != VK_SUCCESS)
      return "vkCreateCommandPool: " + VkName(r);
    VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    alloc.commandPool = pool_;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    if ((r = vk_.AllocateCommandBuffers(device_, &alloc, &cmd_)) != VK_SUCCESS)
      return "vkAllocateCommandBuffers: " + VkName(r);
    VkFenceCreateInfo fence{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vk_.CreateFence(device_, &fence, nullptr, &fence_)) != VK_SUCCESS)
      return "vkCreateFence: " + VkName(r);
    return "";
  }

  std::string Buffer(VkBuffer& buffer, VkDeviceMemory& memory, VkMemoryPropertyFlags want,
                     bool exportable, VkDeviceSize& size) {
    VkExternalMemoryBufferCreateInfo external{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
    external.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
    VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    info.pNext = exportable ? &external : nullptr;
    info.size = bytes_;
    info.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    VkResult r = vk_.CreateBuffer(device_, &info, nullptr, &buffer);
    if (r != VK_SUCCESS) return "vkCreateBuffer: " + VkName(r);
    VkMemoryRequirements req{};
    vk_.GetBufferMemoryRequirements(device_, buffer, &req);
    VkPhysicalDeviceMemoryProperties mem{};
    vk_.GetPhysicalDeviceMemoryProperties(physical_, &mem);
    uint32_t type = UINT32_MAX;
    for (uint32_t i = 0; i < mem.memoryTypeCount && type == UINT32_MAX; ++i) {
      if ((req.memoryTypeBits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want)
        type = i;
    }
    if (type == UINT32_MAX) return "no memory type with the wanted properties";
    VkMemoryDedicatedAllocateInfo dedicated{VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO};
    dedicated.buffer = buffer;
    VkExportMemoryAllocateInfo export_info{VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO};
    export_info.pNext = &dedicated;
    export_info.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
    VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    alloc.pNext = exportable ? &export_info : nullptr;
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = type;
    if ((r = vk_.AllocateMemory(device_, &alloc, nullptr, &memory)) != VK_SUCCESS)
      return "vkAllocateMemory: " + VkName(r);
    if ((r = vk_.BindBufferMemory(device_, buffer, memory, 0)) != VK_SUCCESS)
      return "vkBindBufferMemory: " + VkName(r);
    size = req.size;
    return "";
  }

  std::string CreateSharedBuffer() {
    VkDeviceSize staging_size = 0;
    std::string err =
        Buffer(shared_, shared_memory_, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, true, shared_size_);
    if (err.empty()) {
      err = Buffer(staging_, staging_memory_,
                   VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                   false, staging_size);
    }
    if (!err.empty()) return err;
    VkMemoryGetFdInfoKHR get{VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR};
    get.memory = shared_memory_;
    get.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
    int raw = -1;
    VkResult r = vk_.GetMemoryFdKHR(device_, &get, &raw);
    if (r != VK_SUCCESS) return "vkGetMemoryFdKHR: " + VkName(r);
    memory_fd_.reset(raw);
    steps_.Detail(std::to_string(bytes_) + " bytes (allocation " + std::to_string(shared_size_) +
                  "), opaque fd");
    return "";
  }

  std::string ImportMemory() {
    cudaExternalMemoryHandleDesc desc{};
    desc.type = cudaExternalMemoryHandleTypeOpaqueFd;
    desc.handle.fd = memory_fd_.get();
    desc.size = shared_size_;
    desc.flags = cudaExternalMemoryDedicated;
    cudaError_t err = cudaImportExternalMemory(&cuda_memory_, &desc);
    if (err != cudaSuccess)
      return std::string("cudaImportExternalMemory: ") + cudaGetErrorName(err);
    (void)memory_fd_.release();  // owned by CUDA now
    cudaExternalMemoryBufferDesc buffer{};
    buffer.offset = 0;
    buffer.size = bytes_;
    err = cudaExternalMemoryGetMappedBuffer(&cuda_ptr_, cuda_memory_, &buffer);
    if (err != cudaSuccess)
      return std::string("cudaExternalMemoryGetMappedBuffer: ") + cudaGetErrorName(err);
    return "";
  }

  std::string ExportSemaphore(VkSemaphore& sem, cudaExternalSemaphore_t& cuda_sem) {
    VkExportSemaphoreCreateInfo export_info{VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO};
    export_info.handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
    VkSemaphoreCreateInfo info{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    info.pNext = &export_info;
    VkResult r = vk_.CreateSemaphore(device_, &info, nullptr, &sem);
    if (r != VK_SUCCESS) return "vkCreateSemaphore: " + VkName(r);
    VkSemaphoreGetFdInfoKHR get{VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR};
    get.semaphore = sem;
    get.handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
    int raw = -1;
    if ((r = vk_.GetSemaphoreFdKHR(device_, &get, &raw)) != VK_SUCCESS)
      return "vkGetSemaphoreFdKHR: " + VkName(r);
    UniqueFd fd(raw);
    cudaExternalSemaphoreHandleDesc desc{};
    desc.type = cudaExternalSemaphoreHandleTypeOpaqueFd;
    desc.handle.fd = fd.get();
    cudaError_t err = cudaImportExternalSemaphore(&cuda_sem, &desc);
    if (err != cudaSuccess)
      return std::string("cudaImportExternalSemaphore: ") + cudaGetErrorName(err);
    (void)fd.release();  // owned by CUDA now
    return "";
  }

  std::string ImportSemaphores() {
    std::string err = ExportSemaphore(cuda_done_, cuda_done_cuda_);
    return err.empty() ? ExportSemaphore(vulkan_done_, vulkan_done_cuda_) : err;
  }

  // Records one copy and submits it, waiting on / signalling the given semaphores; waits for it.
  std::string SubmitCopy(VkBuffer from, VkBuffer to, VkSemaphore wait, VkSemaphore signal) {
    vk_.ResetCommandBuffer(cmd_, 0);
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    vk_.BeginCommandBuffer(cmd_, &begin);
    VkBufferCopy region{0, 0, bytes_};
    vk_.CmdCopyBuffer(cmd_, from, to, 1, &region);
    vk_.EndCommandBuffer(cmd_);
    VkPipelineStageFlags stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
    VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submit.waitSemaphoreCount = wait ? 1 : 0;
    submit.pWaitSemaphores = &wait;
    submit.pWaitDstStageMask = &stage;
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cmd_;
    submit.signalSemaphoreCount = signal ? 1 : 0;
    submit.pSignalSemaphores = &signal;
    vk_.ResetFences(device_, 1, &fence_);
    VkResult r = vk_.QueueSubmit(queue_, 1, &submit, fence_);
    if (r != VK_SUCCESS) return "vkQueueSubmit: " + VkName(r);
    r = vk_.WaitForFences(device_, 1, &fence_, VK_TRUE, 10'000'000'000ull);
    return r == VK_SUCCESS ? "" : "vkWaitForFences: " + VkName(r);
  }

  std::string Compare(const unsigned char* got, const std::vector<unsigned char>& want) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] != want[i]) {
        return "byte " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
               std::to_string(want[i]);
      }
    }
    steps_.Detail(std::to_string(want.size()) + " bytes verified");
    return "";
  }

  std::string CudaToVulkan(DeviceContext& ctx) {
    std::vector<unsigned char> pattern(bytes_);
    Pattern(pattern, 0x5eed);
    // A kernel writes the imported buffer in place.
    cudaError_t err = LaunchFillPattern(cuda_ptr_, bytes_, 0x5eed, ctx.stream());
    if (err != cudaSuccess) return std::string("fill kernel: ") + cudaGetErrorName(err);
    cudaExternalSemaphoreSignalParams signal{};
    err = cudaSignalExternalSemaphoresAsync(&cuda_done_cuda_, &signal, 1, ctx.stream());
    if (err != cudaSuccess)
      return std::string("cudaSignalExternalSemaphoresAsync: ") + cudaGetErrorName(err);
    // Vulkan waits on the semaphore CUDA signals: no host synchronisation in between.
    std::string failed = SubmitCopy(shared_, staging_, cuda_done_, VK_NULL_HANDLE);
    if (!failed.empty()) return failed;
    void* mapped = nullptr;
    if (vk_.MapMemory(device_, staging_memory_, 0, bytes_, 0, &mapped) != VK_SUCCESS)
      return "vkMapMemory failed";
    std::string result = Compare(static_cast<unsigned char*>(mapped), pattern);
    vk_.UnmapMemory(device_, staging_memory_);
    return result;
  }

  std::string VulkanToCuda(DeviceContext& ctx) {
    std::vector<unsigned char> pattern(bytes_);
    Pattern(pattern, 0xc0ffee);
    void* mapped = nullptr;
    if (vk_.MapMemory(device_, staging_memory_, 0, bytes_, 0, &mapped) != VK_SUCCESS)
      return "vkMapMemory failed";
    std::memcpy(mapped, pattern.data(), bytes_);
    vk_.UnmapMemory(device_, staging_memory_);
    std::string failed = SubmitCopy(staging_, shared_, VK_NULL_HANDLE, vulkan_done_);
    if (!failed.empty()) return failed;
    // CUDA's stream waits on the semaphore Vulkan signalled, then reads the buffer.
    cudaExternalSemaphoreWaitParams wait{};
    cudaError_t err = cudaWaitExternalSemaphoresAsync(&vulkan_done_cuda_, &wait, 1, ctx.stream());
    if (err != cudaSuccess)
      return std::string("cudaWaitExternalSemaphoresAsync: ") + cudaGetErrorName(err);
    std::vector<unsigned char> back(bytes_, 0);
    err = cudaMemcpyAsync(back.data(), cuda_ptr_, bytes_, cudaMemcpyDeviceToHost, ctx.stream());
    if (err == cudaSuccess) err = cudaStreamSynchronize(ctx.stream());
    if (err != cudaSuccess) return std::string("cudaMemcpyAsync: ") + cudaGetErrorName(err);
    return Compare(back.data(), pattern);
  }

  // Teardown order: CUDA's interop registrations first (semaphores, the mapping, the imported
  // memory), then the graphics side. Idempotent; also runs on every early exit.
  std::string Release() {
    std::string error;
    auto check = [&](cudaError_t err, const char* what) {
      if (err != cudaSuccess && error.empty())
        error = std::string(what) + ": " + cudaGetErrorName(err);
    };
    if (cuda_done_cuda_)
      check(cudaDestroyExternalSemaphore(cuda_done_cuda_), "cudaDestroyExternalSemaphore");
    if (vulkan_done_cuda_)
      check(cudaDestroyExternalSemaphore(vulkan_done_cuda_), "cudaDestroyExternalSemaphore");
    cuda_done_cuda_ = vulkan_done_cuda_ = nullptr;
    if (cuda_ptr_) check(cudaFree(cuda_ptr_), "cudaFree(mapped buffer)");
    cuda_ptr_ = nullptr;
    if (cuda_memory_) check(cudaDestroyExternalMemory(cuda_memory_), "cudaDestroyExternalMemory");
    cuda_memory_ = nullptr;
    memory_fd_.reset();
    if (device_) {
      vk_.DeviceWaitIdle(device_);
      if (cuda_done_) vk_.DestroySemaphore(device_, cuda_done_, nullptr);
      if (vulkan_done_) vk_.DestroySemaphore(device_, vulkan_done_, nullptr);
      if (shared_) vk_.DestroyBuffer(device_, shared_, nullptr);
      if (staging_) vk_.DestroyBuffer(device_, staging_, nullptr);
      if (shared_memory_) vk_.FreeMemory(device_, shared_memory_, nullptr);
      if (staging_memory_) vk_.FreeMemory(device_, staging_memory_, nullptr);
      if (fence_) vk_.DestroyFence(device_, fence_, nullptr);
      if (pool_) vk_.DestroyCommandPool(device_, pool_, nullptr);
      vk_.DestroyDevice(device_, nullptr);
    }
    cuda_done_ = vulkan_done_ = VK_NULL_HANDLE;
    shared_ = staging_ = VK_NULL_HANDLE;
    shared_memory_ = staging_memory_ = VK_NULL_HANDLE;
    fence_ = VK_NULL_HANDLE;
    pool_ = VK_NULL_HANDLE;
    device_ = VK_NULL_HANDLE;
    if (instance_) vk_.DestroyInstance(instance_, nullptr);
    instance_ = VK_NULL_HANDLE;
    if (vk_.lib) dlclose(vk_.lib);
    vk_.lib = nullptr;
    return error;
  }

  InteropReport& report_;
  StepRecorder steps_{report_};
  size_t bytes_;
  Vk vk_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkBuffer shared_ = VK_NULL_HANDLE, staging_ = VK_NULL_HANDLE;
  VkDeviceMemory shared_memory_ = VK_NULL_HANDLE, staging_memory_ = VK_NULL_HANDLE;
  VkDeviceSize shared_size_ = 0;
  UniqueFd memory_fd_;  // until CUDA imports it
  VkSemaphore cuda_done_ = VK_NULL_HANDLE, vulkan_done_ = VK_NULL_HANDLE;
  cudaExternalMemory_t cuda_memory_ = nullptr;
  void* cuda_ptr_ = nullptr;
  cudaExternalSemaphore_t cuda_done_cuda_ = nullptr, vulkan_done_cuda_ = nullptr;
};

}  // namespace

InteropReport ProbeVulkanInterop(GpuWorker& worker, size_t bytes) {
  return RunProbeOnWorker<VulkanProbe>(worker, "vulkan", bytes);
}

}  // namespace mcd
