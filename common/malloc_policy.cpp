#include "common/malloc_policy.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// The sanitizers bring allocators of their own. ASan's mallopt refuses; TSan leaves mallopt to
// glibc, which would answer yes for an allocator nobody uses.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GRADSYNC_OWN_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GRADSYNC_OWN_ALLOCATOR 1
#endif
#endif

namespace gradsync {

bool keep_freed_memory_mapped() {
#if defined(__GLIBC__) && !defined(GRADSYNC_OWN_ALLOCATOR)
  // Setting either threshold also ends glibc's dynamic adjustment of both: each is set here.
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes)) == 1;
#else
  return false;
#endif
}

}  // namespace gradsync
