#!/usr/bin/env bash
# Builds gradsync (unit and integration tests included) with one set of sanitizers and runs ctest
# under it: what `make check-sanitize` calls, once for address,undefined and once for thread.
#   tests/sanitizers/check.sh SANITIZERS BUILD_DIR JOBS
#
# Every report stops its process (halt_on_error) and is written to BUILD_DIR/sanitizer-logs/
# rather than stderr (except UBSan's under GCC, see below). A failing test then shows nothing
# new, but a report can no longer hide inside a test that expects a failure anyway (a bad preset,
# a killed worker) or inside a child process whose stderr a test swallows; so the run fails if
# any log appears, whatever ctest says, and the first lines of each log are printed. Every
# subprocess the integration tests start inherits these settings (the launcher passes its
# environment on to workers and shards).
set -uo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 address,undefined|thread BUILD_DIR JOBS" >&2
  exit 2
fi
sanitizers=$1
build=$2
jobs=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/sanitizers

echo "check-sanitize: $sanitizers in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADSYNC_SANITIZE="$sanitizers" \
  -DGRADSYNC_BUILD_BENCHMARKS=OFF > "$build.configure.log" 2>&1 || {
  cat "$build.configure.log"
  exit 1
}
grep "gradsync:" "$build.configure.log" || true
cmake --build "$build" -j "$jobs" || exit 1

logs=$(cd "$build" && pwd)/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
common="halt_on_error=1:print_stacktrace=1:log_path=$logs/report"
if [[ $sanitizers == thread ]]; then
  # exitcode=66 (TSan's default, made explicit) so a race is never mistaken for an ordinary
  # failure exit of 1; the suppressions silence only the uninstrumented system libraries.
  export TSAN_OPTIONS="$common:exitcode=66:second_deadlock_stack=1:suppressions=$here/tsan.supp"
else
  asan="detect_leaks=1:check_initialization_order=1:strict_init_order=1"
  export ASAN_OPTIONS="$common:$asan:detect_stack_use_after_return=1"
  # GCC links UBSan as its own runtime beside ASan's, and in that pairing it ignores log_path:
  # its reports go to stderr. exitcode=67 at least makes a halted process stand out from an
  # ordinary failure (1) in the launcher's "exited with code N" and in the tests' checks.
  export UBSAN_OPTIONS="$common:exitcode=67"
fi

# Tests that assert wall-clock speed against the cost model cannot pass when every memory access
# costs several times more: skipped under TSan only (ASan's slowdown stays within their bounds).
exclude=()
if [[ $sanitizers == thread ]]; then
  exclude=(-E "^(ps link: a shaped round trip takes what the cost model predicts|integration.network_namespaces)")
fi
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 600 "${exclude[@]}")
rc=$?

reports=$(find "$logs" -type f | sort)
if [[ -n $reports ]]; then
  echo "check-sanitize: $(echo "$reports" | wc -l) sanitizer report(s) in $logs:"
  for r in $reports; do
    echo "--- $r"
    grep -m1 -E "ERROR:|WARNING: ThreadSanitizer|runtime error:" "$r"
    grep -m1 "^SUMMARY:" "$r"
  done
  rc=1
fi
if [[ $rc -eq 0 ]]; then
  echo "check-sanitize: $sanitizers: all tests passed, no reports"
else
  echo "check-sanitize: $sanitizers: FAILED"
fi
exit $rc
