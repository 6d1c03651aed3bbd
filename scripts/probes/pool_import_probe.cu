// What a fresh process pays the CUDA driver to open a tensor of an IPC memory pool, step by step,
// with nothing of memcuda in the way (docs/benchmarks.md, change 24).
//
// The parent makes an IPC-capable pool on device 0 (first growing it to RESERVE bytes and giving
// them back to the pool, to see whether the pool's size matters), allocates 1 MiB from it and
// exports the pool and the pointer. It then starts five fresh processes of itself, each with the
// pool's descriptor inherited and the pointer's export data on its command line. Each brings up
// its CUDA context (untimed), then times: importing the pool, granting the device access, importing
// the pointer, and reading one byte through it. One line per process.
//
//   nvcc -O2 -o pool_import_probe scripts/probes/pool_import_probe.cu
//   ./pool_import_probe 0; ./pool_import_probe 1073741824
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

void Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

int Child(int fd, const char* hex) {
  cudaMemPoolPtrExportData data{};
  for (int i = 0; i < 64; ++i) std::sscanf(hex + 2 * i, "%2hhx", &data.reserved[i]);
  Check(cudaSetDevice(0), "cudaSetDevice");
  Check(cudaFree(nullptr), "context");
  auto t0 = Clock::now();
  cudaMemPool_t pool;
  Check(cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                             cudaMemHandleTypePosixFileDescriptor, 0),
        "cudaMemPoolImportFromShareableHandle");
  auto t1 = Clock::now();
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = 0;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  Check(cudaMemPoolSetAccess(pool, &access, 1), "cudaMemPoolSetAccess");
  auto t2 = Clock::now();
  void* ptr = nullptr;
  Check(cudaMemPoolImportPointer(&ptr, pool, &data), "cudaMemPoolImportPointer");
  auto t3 = Clock::now();
  char byte = 0;
  Check(cudaMemcpy(&byte, ptr, 1, cudaMemcpyDeviceToHost), "touch");
  auto t4 = Clock::now();
  std::printf("import %.0f  set_access %.0f  import_pointer %.0f  touch %.0f  total %.0f us\n", Us(t0, t1),
              Us(t1, t2), Us(t2, t3), Us(t3, t4), Us(t0, t4));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "child") return Child(std::atoi(argv[2]), argv[3]);
  size_t reserve = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 0;
  Check(cudaSetDevice(0), "cudaSetDevice");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  Check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  unsigned long long keep_all = ~0ull;  // what is given back stays in the pool
  Check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all), "release threshold");
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  if (reserve > 0) {
    void* big = nullptr;
    Check(cudaMallocFromPoolAsync(&big, reserve, pool, stream), "grow the pool");
    Check(cudaFreeAsync(big, stream), "cudaFreeAsync");
  }
  void* ptr = nullptr;
  Check(cudaMallocFromPoolAsync(&ptr, 1 << 20, pool, stream), "cudaMallocFromPoolAsync");
  Check(cudaMemsetAsync(ptr, 1, 1 << 20, stream), "cudaMemsetAsync");
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  int fd = -1;
  Check(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0),
        "cudaMemPoolExportToShareableHandle");
  fcntl(fd, F_SETFD, 0);  // inherited by the children across exec
  cudaMemPoolPtrExportData data;
  Check(cudaMemPoolExportPointer(&data, ptr), "cudaMemPoolExportPointer");
  char hex[129];
  for (int i = 0; i < 64; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(data.reserved[i]));
  std::string fd_text = std::to_string(fd);
  for (int i = 0; i < 5; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", argv[0], "child", fd_text.c_str(), hex, static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
  }
  return 0;
}
