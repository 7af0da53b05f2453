#include "worker/stop_request.h"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <string>
#include <vector>

#include "common/error.h"

namespace gradsync {
namespace {

// Written by the handler, read by the training thread: a lock-free atomic is signal-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

struct sigaction g_old_term {};
struct sigaction g_old_usr1 {};

// The first signal is the one that asked: a launcher's later SIGTERM (srun's, once other ranks
// have left) does not rename the stop.
void on_signal(int signal) {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal);
}

void catch_signal(int signal, struct sigaction& old) {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls go on: the loop checks at its next step end
  sigaction(signal, &action, &old);
}

std::string key(int rank) { return "gradsync/stop/" + std::to_string(rank); }

}  // namespace

StopRequest::StopRequest(Store& store, int rank, int world_size, std::chrono::milliseconds timeout)
    : store_(store), rank_(rank), world_size_(world_size), timeout_(timeout) {
  g_signal.store(0);
  catch_signal(SIGTERM, g_old_term);
  catch_signal(SIGUSR1, g_old_usr1);
}

StopRequest::~StopRequest() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
}

int StopRequest::signal() const { return g_signal.load(); }

bool StopRequest::stop_after(std::int64_t steps_done) {
  if (signal() == 0) return false;
  if (!posted_) {
    store_.set(key(rank_), std::to_string(steps_done));
    posted_ = true;
  }
  if (!stop_at_) {
    std::vector<std::string> keys;
    for (int r = 0; r < world_size_; ++r) keys.push_back(key(r));
    if (!store_.check(keys, timeout_)) return false;
    std::int64_t latest = 0;
    for (const std::string& k : keys) {
      latest = std::max<std::int64_t>(latest, std::stoll(store_.get(k, timeout_)));
    }
    stop_at_ = latest + 1;
  }
  GRADSYNC_CHECK(steps_done <= *stop_at_, "a rank went past the step the ranks stop at");
  return steps_done == *stop_at_;
}

}  // namespace gradsync
