// Store: the key-value rendezvous through which ranks find each other (ring addresses, the
// NCCL unique id, failure reports). Three calls, as in Gloo and c10d:
//
//   store.set("addr/3", bytes);                 // never blocks on other ranks
//   store.wait({"addr/0", "addr/1"}, timeout);  // until every key exists
//   auto bytes = store.get("addr/0", timeout);  // waits for the key, then returns it
//   if (store.check({"stop/0", "stop/1"}, timeout)) ...   // every key there now? never waits
//
// Implementations: TcpStore (allreduce/tcp/tcp_store.h; rank 0 hosts the server, every rank
// including 0 is a client) and InMemoryStore (allreduce/in_memory_store.h; N ranks as N
// threads of one test). Thread-safe. A wait that outlasts its timeout throws TimeoutError
// naming the missing keys; check waits for no key, only (up to `timeout`) for the store's answer.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gradsync {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool check(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

}  // namespace gradsync
