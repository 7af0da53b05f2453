# The README's two commands, and a few more for people working on gradsync.
#   make demo   install what is missing, build, run the quickstart preset, plot it
#   make test   install what is missing, build, run every test (ctest)
#   make bench  also install the peers (PyTorch on OpenBLAS, ...) and compare against them
#   make install [DESTDIR=D] [PREFIX=/usr/local]   what `make` built, into D/PREFIX (README)
#   make fuzz            libFuzzer targets (clang, ASan+UBSan), FUZZ_SECONDS each   (docs/testing.md)
#   make check-sanitize  every test under ASan+UBSan (build-asan), then TSan (build-tsan)
BUILD ?= build
JOBS ?= $(shell nproc)
PYTHON := /usr/bin/python3
GRADSYNC := $(BUILD)/bin/gradsync
FUZZ_SECONDS ?= 60
PREFIX ?= /usr/local
FUZZ_TARGETS := fuzz_wire_format fuzz_idx_reader fuzz_preset fuzz_checkpoint

.PHONY: all deps build demo test bench install clean fuzz check-sanitize

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > $(BUILD).configure.log 2>&1 || \
	  { cat $(BUILD).configure.log; exit 1; }
	@grep "gradsync:" $(BUILD).configure.log || true
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@$(GRADSYNC) run quickstart > /dev/null
	@$(PYTHON) plots/plot_results.py results/latest > /dev/null
	@$(GRADSYNC) bench allreduce -n 2 -b 64K -e 16M -f 4 --backend tcp,gloo --json \
	  > results/latest/bench-allreduce.json
	@$(PYTHON) plots/plot_busbw.py results/latest/plots/busbw.png \
	  results/latest/bench-allreduce.json > /dev/null
	@echo
	@cat results/latest/comparison.md
	@echo
	@echo "results: $$(readlink -f results/latest)   (config.yaml, metrics.csv, summary.json per run)"
	@echo "plots:   $$(readlink -f results/latest)/plots"
	@echo "trace:   results/latest/<run>/trace.json (open in https://ui.perfetto.dev or chrome://tracing)"

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

# The GNU layout under DESTDIR/PREFIX, as packaging expects (Debian's dh_auto_install runs
# `make install DESTDIR=debian/tmp`): bin/gradsync, share/gradsync/{presets,plots}, the libraries,
# include/gradsync/ and lib/cmake/gradsync/ for find_package(gradsync). It installs what `make`
# (or `make build`) built and builds nothing itself, so it needs no network and no root but for
# writing into PREFIX. tests/integration/test_install.py runs it into a temporary DESTDIR.
install:
	@test -f $(BUILD)/CMakeCache.txt || \
	  { echo "make install: no build in $(BUILD); run make first" >&2; exit 1; }
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix $(PREFIX)

# The peers first, then the build (what configure finds is what the build has).
bench: deps
	@scripts/install-deps.sh --bench
	@$(MAKE) --no-print-directory build
	@scripts/bench-mlp-vs-pytorch.sh --gradsync $(GRADSYNC)

# Fuzz targets need clang's libFuzzer, so they get their own build folder and compiler; each runs
# on a scratch copy of fuzz/corpus/<target>, so the checked-in seeds never grow.
fuzz:
	@scripts/install-deps.sh --fuzz
	@cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DGRADSYNC_FUZZ=ON -DGRADSYNC_SANITIZE=address,undefined -DGRADSYNC_BUILD_TESTS=OFF \
	  -DGRADSYNC_BUILD_BENCHMARKS=OFF > build-fuzz.configure.log 2>&1 || \
	  { cat build-fuzz.configure.log; exit 1; }
	@grep "gradsync:" build-fuzz.configure.log || true
	@cmake --build build-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	@fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Both builds run even if the first fails, so one make shows every finding.
check-sanitize: deps
	@status=0; \
	tests/sanitizers/check.sh address,undefined build-asan $(JOBS) || status=1; \
	tests/sanitizers/check.sh thread build-tsan $(JOBS) || status=1; \
	exit $$status

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
