#!/usr/bin/env bash
# Runs each libFuzzer target for a bounded time on a scratch copy of its seed corpus, so the
# checked-in corpus never grows, and prints one line per target: executions, seconds, verdict.
#   fuzz/run.sh BUILD_DIR SECONDS [TARGET...]      (what `make fuzz` calls; targets default to all)
# Exits non-zero if any target crashed (a crash, a sanitizer report, an uncaught exception, a
# broken GRADSYNC_FUZZ_REQUIRE, a timeout or running out of memory). The inputs libFuzzer found
# and the crashing input are left in BUILD_DIR/fuzz-run/<target>/ with the full log. Extra
# libFuzzer flags go in FUZZ_ARGS, e.g. FUZZ_ARGS="-max_len=16384".
set -uo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS [TARGET...]" >&2
  exit 2
fi
build=$1
seconds=$2
shift 2
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then targets=(fuzz_wire_format fuzz_idx_reader fuzz_preset fuzz_checkpoint); fi
here=$(cd "$(dirname "$0")" && pwd)

# A UBSan report must stop the run like an ASan one (the build already has no recovery; this
# also covers a binary built otherwise). Leaks count: every input must free what it allocated.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
if [[ -z "${ASAN_SYMBOLIZER_PATH:-}" ]]; then
  for s in llvm-symbolizer llvm-symbolizer-14 /usr/lib/llvm-14/bin/llvm-symbolizer; do
    if command -v "$s" > /dev/null; then export ASAN_SYMBOLIZER_PATH=$(command -v "$s"); break; fi
  done
fi

status=0
printf "%-18s %12s %8s %8s  %s\n" target executions seconds corpus result
for target in "${targets[@]}"; do
  name=${target#fuzz_}
  binary=$build/bin/$target
  work=$build/fuzz-run/$name
  if [[ ! -x $binary ]]; then
    echo "fuzz: $binary not built" >&2
    status=1
    continue
  fi
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$here/corpus/$name/"* "$work/corpus/"
  dict=()
  if [[ -f $here/$name.dict ]]; then dict=("-dict=$here/$name.dict"); fi
  # -timeout: one input taking 25 s is a hang worth reporting; -rss_limit_mb keeps a runaway
  # allocation (a header that asks for gigabytes) a finding instead of an OOM kill.
  started=$SECONDS
  # shellcheck disable=SC2086
  "$binary" "$work/corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=25 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    ${FUZZ_ARGS:-} > "$work/fuzz.log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log" | tail -1)
  took=$((SECONDS - started))
  corpus=$(find "$work/corpus" -type f | wc -l)
  artifacts=$(find "$work/artifacts" -type f | sort)
  if [[ $rc -eq 0 && -z $artifacts ]]; then
    result="ok, no crash"
  else
    result="CRASH (exit $rc): ${artifacts:-no artifact saved}; log $work/fuzz.log"
    status=1
  fi
  printf "%-18s %12s %8s %8s  %s\n" "$target" "${execs:-?}" "$took" "$corpus" "$result"
  if [[ $rc -ne 0 ]]; then
    # The report's first lines name the bug; the rest of the stack is in the log.
    grep -m1 -E "ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error:|GRADSYNC_FUZZ_REQUIRE|terminate called|uncaught" \
      "$work/fuzz.log" | sed 's/^/    /'
    grep -m1 "^SUMMARY:" "$work/fuzz.log" | sed 's/^/    /'
  fi
done
exit $status
