#include "allreduce/gloo/sigpipe_blocked.h"

#include <pthread.h>
#include <time.h>

namespace gradsync::gloo {

SigpipeBlocked::SigpipeBlocked() {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
}

SigpipeBlocked::~SigpipeBlocked() {
  if (sigismember(&old_, SIGPIPE)) return;  // blocked before us: the caller's business
  const timespec zero{0, 0};
  while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void block_sigpipe_on_this_thread() {
  thread_local const bool blocked = [] {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    return pthread_sigmask(SIG_BLOCK, &pipe, nullptr) == 0;
  }();
  (void)blocked;
}

}  // namespace gradsync::gloo
