#include "allreduce/in_memory_store.h"

#include "common/error.h"

namespace gradsync {

void InMemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::string InMemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  std::lock_guard lock(mutex_);
  return values_.at(key);
}

bool InMemoryStore::check(const std::vector<std::string>& keys,
                          std::chrono::milliseconds /*timeout*/) {
  std::lock_guard lock(mutex_);
  for (const auto& key : keys) {
    if (values_.find(key) == values_.end()) return false;
  }
  return true;
}

void InMemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const auto all_present = [&] {
    for (const auto& key : keys) {
      if (values_.find(key) == values_.end()) return false;
    }
    return true;
  };
  if (changed_.wait_for(lock, timeout, all_present)) return;
  std::string missing;
  for (const auto& key : keys) {
    if (values_.find(key) == values_.end()) missing += (missing.empty() ? "" : ", ") + key;
  }
  // No process stands behind an in-memory store, hence rank -1.
  throw TimeoutError(
      -1, "in-memory store", "store wait",
      "timed out after " + std::to_string(timeout.count()) + " ms; missing keys: " + missing);
}

}  // namespace gradsync
