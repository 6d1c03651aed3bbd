#include "common/code_pages.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>

// Linux 5.14; older kernels answer EINVAL and the pages are touched one by one instead.
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace mcd {
namespace {

int MapExecutableSegments(dl_phdr_info* info, size_t, void* base) {
  if (reinterpret_cast<void*>(info->dlpi_addr) != base) return 0;  // another object
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
    uintptr_t start = (info->dlpi_addr + segment.p_vaddr) & ~(page - 1);
    uintptr_t end = info->dlpi_addr + segment.p_vaddr + segment.p_memsz;
    if (madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_READ) == 0) continue;
    for (uintptr_t at = start; at < end; at += page) {
      (void)*reinterpret_cast<const volatile unsigned char*>(at);
    }
  }
  return 1;
}

}  // namespace

void MapOwnCodePages() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&MapOwnCodePages), &self) == 0 || self.dli_fbase == nullptr)
      return;
    dl_iterate_phdr(MapExecutableSegments, self.dli_fbase);
  });
}

}  // namespace mcd
