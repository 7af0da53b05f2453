#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "worker/trace_writer.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::microseconds;

class TraceTempDir {
 public:
  TraceTempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("gradsync_trace_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TraceTempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);  // throws (failing the test) on malformed JSON
}

// Events with this phase and, for metadata, this name.
std::vector<json> events(const json& trace, const std::string& ph, const std::string& name = "") {
  std::vector<json> out;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") == ph && (name.empty() || event.at("name") == name)) out.push_back(event);
  }
  return out;
}

}  // namespace

TEST_CASE("trace writer: writes valid JSON with spans in microseconds from the origin") {
  TraceTempDir dir;
  const std::string path = dir.file("trace.json");
  const auto origin = Clock::now();
  TraceWriter trace(origin, 100);
  trace.add_span(0, "compute", 7, origin + microseconds(1500), origin + microseconds(2500));
  TraceSpan reduce{"allreduce", 8, origin + microseconds(3000), origin + microseconds(3250)};
  reduce.bytes = 4096;
  reduce.index = 2;
  trace.add_span(1, TraceTrack::kCommunication, reduce);
  trace.write(path);

  CHECK_FALSE(fs::exists(path + ".tmp"));
  const json doc = read_json(path);
  CHECK(doc.at("displayTimeUnit") == "ms");
  CHECK(doc.at("otherData").at("dropped_spans") == 0);

  const auto spans = events(doc, "X");
  REQUIRE(spans.size() == 2);
  std::map<std::string, json> by_name;
  for (const auto& s : spans) by_name[s.at("name").get<std::string>()] = s;
  const json& compute = by_name.at("compute");
  CHECK(compute.at("cat") == "step");
  CHECK(compute.at("pid") == 0);
  CHECK(compute.at("tid") == 0);
  CHECK(compute.at("ts").get<double>() == doctest::Approx(1500.0));
  CHECK(compute.at("dur").get<double>() == doctest::Approx(1000.0));
  CHECK(compute.at("args").at("step") == 7);
  // Rank 1's process, its communication track.
  const json& communicate = by_name.at("allreduce");
  CHECK(communicate.at("pid") == 1);
  CHECK(communicate.at("tid") == 1);
  CHECK(communicate.at("ts").get<double>() == doctest::Approx(3000.0));
  CHECK(communicate.at("dur").get<double>() == doctest::Approx(250.0));
  CHECK(communicate.at("args").at("step") == 8);
  CHECK(communicate.at("args").at("bytes") == 4096);
  CHECK(communicate.at("args").at("index") == 2);
}

TEST_CASE("trace writer: names every rank and shard seen, and their tracks") {
  TraceTempDir dir;
  const std::string path = dir.file("trace.json");
  const auto origin = Clock::now();
  TraceWriter trace(origin, 10);
  // Ranks 0 and 2 and shard 1 only: rank 1 never reported, so it gets no process.
  trace.add_span(2, "compute", 0, origin, origin + microseconds(10));
  trace.add_span(0, "compute", 0, origin, origin + microseconds(10));
  trace.add_span(1, TraceTrack::kShardApply, TraceSpan{"apply", 0, origin, origin});
  trace.write(path);
  const json doc = read_json(path);

  std::map<int, std::string> processes;
  for (const auto& e : events(doc, "M", "process_name")) {
    processes[e.at("pid").get<int>()] = e.at("args").at("name").get<std::string>();
  }
  CHECK(processes == std::map<int, std::string>{
                         {0, "rank 0"}, {2, "rank 2"}, {kShardProcessBase + 1, "shard 1"}});
  std::map<std::pair<int, int>, std::string> tracks;
  for (const auto& e : events(doc, "M", "thread_name")) {
    tracks[{e.at("pid").get<int>(), e.at("tid").get<int>()}] =
        e.at("args").at("name").get<std::string>();
  }
  CHECK(tracks.at({2, 0}) == "rank 2 compute");
  CHECK(tracks.at({2, 1}) == "rank 2 communication");
  CHECK(tracks.at({kShardProcessBase + 1, 0}) == "shard 1 receive");
  CHECK(tracks.at({kShardProcessBase + 1, 1}) == "shard 1 apply");
  CHECK(tracks.at({kShardProcessBase + 1, 2}) == "shard 1 reply");
  CHECK(tracks.size() == 2 * 2 + 3);
}

TEST_CASE("trace writer: a push and the shard span receiving it are joined by one arrow") {
  TraceTempDir dir;
  const std::string path = dir.file("trace.json");
  const auto origin = Clock::now();
  TraceWriter trace(origin, 10);
  TraceSpan push{"push_pull", 3, origin + microseconds(100), origin + microseconds(900)};
  push.flow_out = trace_flow_id(1, 0, 3);
  TraceSpan receive{"receive", 3, origin + microseconds(300), origin + microseconds(600)};
  receive.index = 1;
  receive.flow_in = trace_flow_id(1, 0, 3);
  trace.add_span(1, TraceTrack::kCommunication, push);
  trace.add_span(0, TraceTrack::kShardReceive, receive);
  trace.write(path);
  const json doc = read_json(path);

  const auto starts = events(doc, "s");
  const auto ends = events(doc, "f");
  REQUIRE(starts.size() == 1);
  REQUIRE(ends.size() == 1);
  CHECK(starts[0].at("id") == ends[0].at("id"));
  CHECK(starts[0].at("pid") == 1);
  CHECK(ends[0].at("pid") == kShardProcessBase);
  CHECK(ends[0].at("bp") == "e");
  CHECK(ends[0].at("ts").get<double>() == doctest::Approx(300.0));
  // Ids differ by rank, shard and step, and none is 0 ("no arrow").
  CHECK(trace_flow_id(0, 0, 0) != 0);
  CHECK(trace_flow_id(1, 0, 3) != trace_flow_id(0, 1, 3));
  CHECK(trace_flow_id(1, 0, 3) != trace_flow_id(1, 0, 4));
  for (const auto& e : events(doc, "X")) {
    if (e.at("name") == "receive") CHECK(e.at("args").at("worker") == 1);
  }
}

TEST_CASE("trace writer: caps spans per rank and counts the dropped ones") {
  TraceTempDir dir;
  const std::string path = dir.file("trace.json");
  const auto origin = Clock::now();
  TraceWriter trace(origin, 3);
  for (int step = 0; step < 5; ++step) {
    trace.add_span(0, "compute", step, origin + microseconds(step * 100),
                   origin + microseconds(step * 100 + 50));
  }
  trace.add_span(1, "compute", 0, origin, origin + microseconds(5));  // own quota
  trace.write(path);
  const json doc = read_json(path);

  int rank0 = 0;
  int rank1 = 0;
  for (const auto& e : events(doc, "X")) {
    if (e.at("pid") == 0) {
      ++rank0;
      CHECK(e.at("args").at("step").get<int>() < 3);  // the earliest spans are the ones kept
    } else {
      ++rank1;
    }
  }
  CHECK(rank0 == 3);
  CHECK(rank1 == 1);
  CHECK(doc.at("otherData").at("dropped_spans") == 2);
}

TEST_CASE("trace writer: rewriting replaces the file") {
  TraceTempDir dir;
  const std::string path = dir.file("trace.json");
  const auto origin = Clock::now();
  TraceWriter trace(origin, 10);
  trace.write(path);  // no spans yet: still a valid, empty trace
  CHECK(events(read_json(path), "X").empty());
  trace.add_span(0, "evaluate", 1, origin, origin + microseconds(1));
  trace.write(path);
  CHECK(events(read_json(path), "X").size() == 1);
}

TEST_CASE("trace writer: an unwritable path throws naming the path") {
  const std::string path = "/nonexistent_gradsync_dir/sub/trace.json";
  TraceWriter trace(Clock::now(), 10);
  CHECK_THROWS_WITH_AS(trace.write(path), doctest::Contains(path.c_str()), Error);
}

}  // namespace gradsync
