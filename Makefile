# The README's two commands, and a few more for people working on gradsync.
#   make demo   install what is missing, build, run the quickstart preset, plot it
#   make test   install what is missing, build, run every test (ctest)
#   make bench  also install the peers (PyTorch on OpenBLAS, ...) and compare against them
BUILD ?= build
JOBS ?= $(shell nproc)
PYTHON := /usr/bin/python3
GRADSYNC := $(BUILD)/bin/gradsync

.PHONY: all deps build demo test bench clean

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
	@echo
	@cat results/latest/comparison.md
	@echo
	@echo "results: $$(readlink -f results/latest)   (config.yaml, metrics.csv, summary.json per run)"
	@echo "plots:   $$(readlink -f results/latest)/plots"
	@echo "trace:   results/latest/<run>/trace.json (open in https://ui.perfetto.dev or chrome://tracing)"

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	@scripts/install-deps.sh --bench
	@scripts/bench-mlp-vs-pytorch.sh $(GRADSYNC)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
