// Where the cost of a fresh process's first cudaMemPoolImportPointer goes (docs/benchmarks.md,
// change 24): once per process, or per chunk of the pool?
//
// The parent makes an IPC-capable pool on device 0 and allocates from it: A (1 MiB), a 256 MiB
// spacer, B (1 MiB, so in another chunk than A) and C (1 MiB, right after B), and exports the
// pool and the three pointers. Then, six times, it allocates one more 1 MiB block D (as a tensor
// created after the pool was shared) and starts a fresh process of itself, which imports the
// pool and the pointers A, B, C, D in that order, timing each, then reads a byte of B (the
// process's first read) and of D. One line per process.
//
//   nvcc -O2 -o pool_pointer_probe scripts/probes/pool_pointer_probe.cu && ./pool_pointer_probe
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
constexpr size_t kMiB = 1 << 20;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

void Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

std::string Hex(const cudaMemPoolPtrExportData& data) {
  char out[129];
  for (int i = 0; i < 64; ++i) std::snprintf(out + 2 * i, 3, "%02x", static_cast<unsigned char>(data.reserved[i]));
  return out;
}

cudaMemPoolPtrExportData Unhex(const char* hex) {
  cudaMemPoolPtrExportData data{};
  for (int i = 0; i < 64; ++i) std::sscanf(hex + 2 * i, "%2hhx", &data.reserved[i]);
  return data;
}

int Child(int fd, char** hex) {
  cudaMemPoolPtrExportData data[4];
  for (int i = 0; i < 4; ++i) data[i] = Unhex(hex[i]);  // parsed before anything is timed
  Check(cudaSetDevice(0), "cudaSetDevice");
  Check(cudaFree(nullptr), "context");
  auto t0 = Clock::now();
  cudaMemPool_t pool;
  Check(cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                             cudaMemHandleTypePosixFileDescriptor, 0),
        "cudaMemPoolImportFromShareableHandle");
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = 0;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  Check(cudaMemPoolSetAccess(pool, &access, 1), "cudaMemPoolSetAccess");
  Clock::time_point t[5] = {Clock::now()};
  void* ptr[4] = {};
  for (int i = 0; i < 4; ++i) {
    Check(cudaMemPoolImportPointer(&ptr[i], pool, &data[i]), "cudaMemPoolImportPointer");
    t[i + 1] = Clock::now();
  }
  char byte = 0;
  Check(cudaMemcpy(&byte, ptr[1], 1, cudaMemcpyDeviceToHost), "read B");
  auto t6 = Clock::now();
  Check(cudaMemcpy(&byte, ptr[3], 1, cudaMemcpyDeviceToHost), "read D");
  auto t7 = Clock::now();
  std::printf("pool+access %.0f  A (first) %.0f  B (other chunk) %.0f  C (next to B) %.0f  D (made later) %.0f  "
              "read B %.0f  read D %.0f us\n",
              Us(t0, t[0]), Us(t[0], t[1]), Us(t[1], t[2]), Us(t[2], t[3]), Us(t[3], t[4]), Us(t[4], t6), Us(t6, t7));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "child") return Child(std::atoi(argv[2]), argv + 3);
  Check(cudaSetDevice(0), "cudaSetDevice");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  Check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  unsigned long long keep_all = ~0ull;
  Check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all), "release threshold");
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  void *a = nullptr, *spacer = nullptr, *b = nullptr, *c = nullptr;
  Check(cudaMallocFromPoolAsync(&a, kMiB, pool, stream), "A");
  Check(cudaMallocFromPoolAsync(&spacer, 256 * kMiB, pool, stream), "spacer");
  Check(cudaMallocFromPoolAsync(&b, kMiB, pool, stream), "B");
  Check(cudaMallocFromPoolAsync(&c, kMiB, pool, stream), "C");
  Check(cudaMemsetAsync(b, 1, kMiB, stream), "cudaMemsetAsync");
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  int fd = -1;
  Check(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0), "export pool");
  fcntl(fd, F_SETFD, 0);  // inherited by the children across exec
  cudaMemPoolPtrExportData data;
  std::string hex[4];
  void* exported[3] = {a, b, c};
  for (int i = 0; i < 3; ++i) {
    Check(cudaMemPoolExportPointer(&data, exported[i]), "cudaMemPoolExportPointer");
    hex[i] = Hex(data);
  }
  std::string fd_text = std::to_string(fd);
  for (int i = 0; i < 6; ++i) {
    void* d = nullptr;
    Check(cudaMallocFromPoolAsync(&d, kMiB, pool, stream), "D");
    Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    Check(cudaMemPoolExportPointer(&data, d), "cudaMemPoolExportPointer");
    hex[3] = Hex(data);
    pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", argv[0], "child", fd_text.c_str(), hex[0].c_str(), hex[1].c_str(), hex[2].c_str(),
            hex[3].c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
  }
  return 0;
}
