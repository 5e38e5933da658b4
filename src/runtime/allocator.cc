// The C library's allocator tuned for the runtime's allocate-and-free-per-node pattern.
#include "allocator.h"

#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace autopar::runtime {

void keep_freed_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    // 32 MiB is the largest threshold glibc accepts (half its per-thread heap size).
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  });
#endif
}

}  // namespace autopar::runtime
