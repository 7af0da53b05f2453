// GlooStore: Gloo's rendezvous Store (gloo/rendezvous/store.h) over gradsync's own
// (allreduce/store.h), so that Gloo's ranks find each other through the Store every other
// communicator uses (TcpStore on rank 0 in a job, InMemoryStore in tests): no file store, no
// HashStore, nothing Gloo-specific to start.
//
//   GlooStore rendezvous(store, "gloo", options.timeout);
//   context->connectFullMesh(rendezvous, device);   // Gloo's set / get / wait land in `store`
//
// Keys: Gloo's key k is stored as "<prefix>/k", so several communicators (and TcpRing's own
// keys) can share one Store. Values are Gloo's bytes, unchanged.
//
// Blocking: set never waits on other ranks. get and wait wait for their keys up to `timeout`
// (Gloo's get has no timeout of its own; Gloo's timed wait passes the context's, which the
// communicator sets to the same value); a wait that outlasts it throws the TimeoutError of the
// gradsync Store underneath, naming the missing keys as that Store says them (with the prefix).
// Thread safety: as the underlying Store's. Only the Gloo headers' users include this header
// (allreduce/gloo/gloo_communicator.cpp), never a public one.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "allreduce/store.h"

namespace gradsync {

class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  // `store` must outlive this object.
  GlooStore(gradsync::Store& store, std::string prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // "<prefix>/key": where Gloo's `key` lives in the gradsync Store.
  std::string full_key(const std::string& key) const;

 private:
  gradsync::Store& store_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace gradsync
