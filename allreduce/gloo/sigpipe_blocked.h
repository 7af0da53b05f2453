// SIGPIPE and Gloo: Gloo writes to its sockets with writev, without MSG_NOSIGNAL, so writing to a
// peer that has gone raises SIGPIPE, which ends the process unless the thread that wrote blocks
// it (Python, Gloo's usual host, ignores it for the whole process; gradsync leaves the process's
// handlers alone). SIGPIPE goes to the thread that wrote, so it is enough to block it on every
// thread that writes to Gloo's sockets: Gloo's event loop (it inherits the mask of the thread
// that creates the device), the communicator's queue thread, and the caller of abort() or the
// destructor. Blocked, the write fails with EPIPE, which Gloo reports as an error like any other.
//
//   { const SigpipeBlocked no_sigpipe;  device = CreateDevice(attr); }   // a caller's thread
//   block_sigpipe_on_this_thread();                                      // a thread of ours
//
// Both act on the calling thread only. Internal to allreduce/gloo/.
#pragma once

#include <signal.h>

namespace gradsync::gloo {

// For the scope of this object SIGPIPE is blocked on the calling thread; one raised meanwhile is
// taken off the thread's pending set before the old mask is restored, so it is never delivered.
class SigpipeBlocked {
 public:
  SigpipeBlocked();
  ~SigpipeBlocked();
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

// Blocks SIGPIPE on the calling thread for good (once per thread): for the queue's thread, which
// is ours.
void block_sigpipe_on_this_thread();

}  // namespace gradsync::gloo
