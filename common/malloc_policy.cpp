#include "common/malloc_policy.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace gradsync {

bool keep_freed_memory_mapped() {
#if defined(__GLIBC__)
  // Setting either threshold also ends glibc's dynamic adjustment of both: each is set here.
  // The first refusal means another allocator answers (sanitizers): the second is not tried.
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes)) == 1;
#else
  return false;
#endif
}

}  // namespace gradsync
