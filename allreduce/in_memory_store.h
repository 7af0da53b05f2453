// A Store shared by N ranks running as N threads of one process (tests, and single-process
// tools). Thread-safe; wait/get block on a condition variable with the given timeout.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "allreduce/store.h"

namespace gradsync {

class InMemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace gradsync
