#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <iterator>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "tests/support/temp_dir.h"
#include "worker/metrics_writer.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using gradsync::testing::TempDir;

constexpr char kHeader[] =
    "step,rank,epoch,time_s,loss,compute_s,communicate_s,wait_s,bytes_sent,bytes_received,"
    "staleness";

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream stream(line);
  for (std::string field; std::getline(stream, field, ',');) fields.push_back(field);
  return fields;
}

MetricsRow make_row(std::int64_t step, int rank) {
  MetricsRow row;
  row.step = step;
  row.rank = rank;
  row.epoch = step / 100;
  row.time_s = 1.0 + static_cast<double>(step) * 0.001;
  row.loss = 2.302585 / static_cast<double>(step + 1);
  row.stats.compute_s = 0.000123456;
  row.stats.communicate_s = 0.25;
  row.stats.wait_s = 0;
  row.stats.bytes_sent = 5000000000ULL;  // beyond 32 bits: must not be truncated
  row.stats.bytes_received = static_cast<std::uint64_t>(step) * 4;
  return row;
}

}  // namespace

TEST_CASE("metrics writer: header is exact even with no rows") {
  TempDir dir;
  const std::string path = dir.file("metrics.csv");
  { MetricsWriter writer(path); }
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == kHeader);
}

TEST_CASE("metrics writer: rows parse back with their values") {
  TempDir dir;
  const std::string path = dir.file("metrics.csv");
  MetricsRow row;
  row.step = 1234;
  row.rank = 3;
  row.epoch = 2;
  row.time_s = 3723.123456789;
  row.loss = 0.43125;
  row.stats = {0.0123456789, 0.5, 1e-7, 5000000000ULL, 42};
  row.stats.staleness = 7;
  {
    MetricsWriter writer(path);
    CHECK(writer.path() == path);
    writer.write(row);
  }
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 2);
  const auto f = split(lines[1]);
  REQUIRE(f.size() == 11);
  CHECK(f[0] == "1234");
  CHECK(f[1] == "3");
  CHECK(f[2] == "2");
  CHECK(std::stod(f[3]) == doctest::Approx(3723.123456789).epsilon(1e-9));
  CHECK(f[4] == "0.43125");
  CHECK(std::stod(f[5]) == doctest::Approx(0.0123456789).epsilon(1e-8));
  CHECK(std::stod(f[6]) == 0.5);
  CHECK(std::stod(f[7]) == doctest::Approx(1e-7).epsilon(1e-9));
  CHECK(f[8] == "5000000000");
  CHECK(f[9] == "42");
  CHECK(f[10] == "7");
}

TEST_CASE("metrics writer: rows from 4 threads are all present and whole") {
  TempDir dir;
  const std::string path = dir.file("metrics.csv");
  constexpr int kThreads = 4;
  constexpr int kSteps = 300;
  {
    MetricsWriter writer(path);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < kThreads; ++rank) {
      threads.emplace_back([&writer, rank] {
        for (int step = 0; step < kSteps; ++step) writer.write(make_row(step, rank));
      });
    }
    for (auto& thread : threads) thread.join();
  }
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 1 + kThreads * kSteps);
  CHECK(lines[0] == kHeader);
  std::set<std::pair<int, int>> seen;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto f = split(lines[i]);
    REQUIRE_MESSAGE(f.size() == 11, lines[i]);
    const int step = std::stoi(f[0]);
    const int rank = std::stoi(f[1]);
    CHECK(f[2] == std::to_string(step / 100));
    CHECK(f[8] == "5000000000");
    CHECK(f[9] == std::to_string(step * 4));
    seen.insert({rank, step});
  }
  CHECK(seen.size() == static_cast<std::size_t>(kThreads * kSteps));
}

TEST_CASE("metrics writer: rows are on disk while the writer is still open") {
  TempDir dir;
  const std::string path = dir.file("metrics.csv");
  MetricsWriter writer(path);
  writer.write(make_row(0, 0));
  writer.write(make_row(1, 0));
  // Read through a separate handle: only flushed bytes are visible.
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 3);
  CHECK(split(lines[2]).size() == 11);
}

TEST_CASE("metrics writer: an unwritable path throws naming the path") {
  const std::string path = "/nonexistent_gradsync_dir/sub/metrics.csv";
  try {
    MetricsWriter writer(path);
    FAIL("expected gradsync::Error");
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find("No such file or directory") != std::string::npos);
  }
}

TEST_CASE("metrics writer: a full disk throws at the first flush") {
  if (!fs::exists("/dev/full")) return;  // Linux only
  CHECK_THROWS_WITH_AS(MetricsWriter("/dev/full"), doctest::Contains("/dev/full"), Error);
}

TEST_CASE("metrics writer: a disk that fills mid-row leaves the rows before it whole") {
  // RLIMIT_FSIZE cuts a write short at the limit, as a full disk does (then EFBIG, and SIGXFSZ,
  // ignored here): in a child process, so the limit binds nothing else.
  TempDir dir;
  const std::string path = dir.file("metrics.csv");
  const std::size_t header = std::string(kHeader).size() + 1;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{header + 150, header + 150};  // room for one row and part of the next
    setrlimit(RLIMIT_FSIZE, &limit);
    try {
      MetricsWriter writer(path);
      for (int step = 1; step <= 100; ++step) writer.write({step, 0, 0, 0.5, 1.25, {}});
    } catch (const Error& e) {
      const std::string message = e.what();
      _exit(message.find(path + ": cannot write metrics row: ") == 0 ? 3 : 4);
    }
    _exit(5);
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);  // it threw, naming the file
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.ends_with("\n"));  // no row cut short
  const auto lines = read_lines(path);
  REQUIRE(lines.size() >= 2);  // the header and at least one row
  CHECK(lines.size() < 100);   // the limit did bite
  for (std::size_t i = 1; i < lines.size(); ++i) {
    CHECK(std::count(lines[i].begin(), lines[i].end(), ',') == 10);
  }
}

TEST_CASE("metrics writer: a restart keeps the rows before its checkpoint, and no torn row") {
  TempDir dir;
  const std::string path = dir.file("metrics.csv");
  {
    MetricsWriter writer(path);
    for (std::int64_t step = 0; step < 5; ++step) {
      for (int rank = 0; rank < 2; ++rank) writer.write({step, rank, 0, 0.1, 1.0, {}});
    }
  }
  {
    std::ofstream torn(path, std::ios::app);
    torn << "5,0,0,0.5";  // the failed attempt died inside a row
  }
  keep_rows_before(path, 3);
  const std::vector<std::string> lines = read_lines(path);
  REQUIRE(lines.size() == 1 + 3 * 2);
  CHECK(lines[0] == kHeader);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    CHECK(std::stoll(lines[i]) == static_cast<long long>((i - 1) / 2));
  }
  // From the start (no checkpoint yet): the header alone.
  keep_rows_before(path, 0);
  CHECK(read_lines(path) == std::vector<std::string>{kHeader});
  // The restart appends after what was kept.
  MetricsWriter(path, MetricsWriter::Mode::kAppend).write({0, 1, 0, 0.2, 1.0, {}});
  CHECK(read_lines(path).size() == 2);
}

}  // namespace gradsync
