// Links the installed gradsync package (tests/install_consumer/CMakeLists.txt) and runs one step
// of two strategies through it: `single` from make_strategies, and `allreduce` over two ranks as
// two threads of this process, rendezvousing through an InMemoryStore and reducing over the TCP
// ring on loopback. Exit 0 when both give the parameters SGD must give, 1 otherwise.
#include <gradsync/allreduce/in_memory_store.h>
#include <gradsync/allreduce/make_communicator.h>
#include <gradsync/common/error.h>
#include <gradsync/strategies/allreduce/allreduce_strategy.h>
#include <gradsync/strategies/make_strategy.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace {

// lr 0.5 without momentum or weight decay: p - 0.5 * g, exact in float for these values.
const gradsync::SgdOptions kSgd{0.5, 0.0, 0.0};
const std::array<float, 4> kStart = {1.0f, 2.0f, 3.0f, 4.0f};

bool expect(const std::string& what, const std::vector<float>& got, float shift) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != kStart[i] - shift) {
      std::fprintf(stderr, "consumer: %s: parameter %zu is %g, expected %g\n", what.c_str(), i,
                   static_cast<double>(got[i]), static_cast<double>(kStart[i] - shift));
      return false;
    }
  }
  return true;
}

// `single`: gradient 2 everywhere, so every parameter moves by 0.5 * 2 = 1.
bool single_step() {
  gradsync::StrategyOptions options;
  options.name = "single";
  options.sgd = kSgd;
  auto strategies = gradsync::make_strategies(options);
  std::vector<float> params(kStart.begin(), kStart.end());
  std::vector<float> grads(params.size(), 2.0f);
  strategies.at(0)->init(params);
  strategies.at(0)->synchronize(grads, params);
  return expect("single", params, 1.0f);
}

// `allreduce` over two ranks: rank 1 starts from other parameters (init's broadcast makes them
// rank 0's), the gradients 1 and 3 average to 2, so both ranks move by 1.
bool allreduce_step() {
  constexpr int kRanks = 2;
  gradsync::InMemoryStore store;
  std::vector<std::vector<float>> params(kRanks);
  std::vector<std::string> errors(kRanks);
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        try {
          gradsync::CommunicatorOptions communicator;
          communicator.backend = "tcp";
          communicator.tcp.timeout = std::chrono::milliseconds(20000);
          auto comm = gradsync::make_communicator(store, r, kRanks, communicator);
          gradsync::AllreduceStrategyOptions options;
          options.sgd = kSgd;
          gradsync::AllreduceStrategy strategy(comm, options);
          std::vector<float> mine(kStart.begin(), kStart.end());
          if (r == 1) mine.assign(mine.size(), 9.0f);
          std::vector<float> grads(mine.size(), r == 0 ? 1.0f : 3.0f);
          strategy.init(mine);
          strategy.synchronize(grads, mine);
          strategy.finish(grads, mine);
          params[r] = mine;
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
  }
  bool ok = true;
  for (int r = 0; r < kRanks; ++r) {
    if (!errors[r].empty()) {
      std::fprintf(stderr, "consumer: allreduce rank %d: %s\n", r, errors[r].c_str());
      ok = false;
    } else {
      ok = expect("allreduce rank " + std::to_string(r), params[r], 1.0f) && ok;
    }
  }
  return ok;
}

}  // namespace

int main() {
  try {
    const bool single = single_step();
    const bool allreduce = allreduce_step();
    if (!single || !allreduce) return 1;
    std::printf("consumer: single and allreduce steps as expected\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
