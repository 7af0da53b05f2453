#include "allreduce/gloo/gloo_store.h"

#include <utility>

namespace gradsync {

GlooStore::GlooStore(gradsync::Store& store, std::string prefix, std::chrono::milliseconds timeout)
    : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

std::string GlooStore::full_key(const std::string& key) const { return prefix_ + "/" + key; }

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(full_key(key), std::string(data.begin(), data.end()));
}

// Gloo calls get without a timeout (after a timed wait for the same key, or for a key every rank
// sets before it reads the others'): the gradsync Store's get bounds it with ours.
std::vector<char> GlooStore::get(const std::string& key) {
  const std::string value = store_.get(full_key(key), timeout_);
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(full_key(key));
  // Gloo passes its context's timeout, which is ours; a zero (Gloo's "no timeout") would mean
  // waiting forever, so it falls back to ours as well.
  store_.wait(full, timeout > std::chrono::milliseconds::zero() ? timeout : timeout_);
}

}  // namespace gradsync
