// libFuzzer target: the checkpoint decoder (common/checkpoint_file.h).
//
// The input is a whole checkpoint part as read from disk. parse_checkpoint_part() must either
// throw DataError or return a part that keeps the format's promises (a range inside the model,
// exactly end - begin parameters and momentum values, a bounded description); an accepted part
// must re-encode to exactly the bytes read. The header-only parse (how a resuming run learns a
// checkpoint's step) is fuzzed on the same bytes and must agree with the full parse.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/checkpoint_file.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  gradsync::fuzz::expect_only_gradsync_errors<gradsync::DataError>([&] {
    const gradsync::CheckpointPart head = gradsync::parse_checkpoint_part(bytes, "input", true);
    GRADSYNC_FUZZ_REQUIRE(head.begin <= head.end && head.end <= head.total, "header range");
    GRADSYNC_FUZZ_REQUIRE(head.params.empty() && head.momentum.empty(), "header-only payload");
  });
  gradsync::fuzz::expect_only_gradsync_errors<gradsync::DataError>([&] {
    const gradsync::CheckpointPart part = gradsync::parse_checkpoint_part(bytes, "input");
    const std::uint64_t n = part.end - part.begin;
    GRADSYNC_FUZZ_REQUIRE(part.begin <= part.end && part.end <= part.total, "range");
    GRADSYNC_FUZZ_REQUIRE(part.params.size() == n && part.momentum.size() == n, "payload size");
    GRADSYNC_FUZZ_REQUIRE(part.description.size() <= 4096, "description size");
    const gradsync::CheckpointPart head = gradsync::parse_checkpoint_part(bytes, "input", true);
    GRADSYNC_FUZZ_REQUIRE(head.step == part.step && head.description == part.description,
                          "header-only parse disagrees with the full one");
    GRADSYNC_FUZZ_REQUIRE(gradsync::encode_checkpoint_part(part) == bytes,
                          "re-encoding changed the bytes");
  });
  return 0;
}
