# The front door. Two commands matter on a fresh Debian 12 machine:
#   make demo   the main job on the simulator
#   make test   build everything and run all tests
PRESET ?= release
BUILD  := build/$(PRESET)
JOBS   ?= $(shell nproc)
# ccache hits across clones in different directories (CI builds a fresh clone).
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

.PHONY: all deps build test test-unit test-sanitize demo bench clean format

all: build

deps:
	@scripts/install-deps.sh build

build: deps
	@cmake --preset $(PRESET) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@scripts/install-deps.sh test
	@cd $(BUILD) && ctest -j $(JOBS) --output-on-failure --timeout 300

# The minimal build tests/gpu/run.sh makes on GPU machines (libc, libdl and pthreads
# only): it must keep building and linking where only the CUDA headers are.
.PHONY: build-minimal
build-minimal: deps
	@cmake --preset minimal -DGS_BUILD_TESTS=OFF >/dev/null
	@cmake --build build/minimal -j $(JOBS)

# Unit tests under a sanitizer (CI runs ubsan; asan and tsan presets exist too).
test-sanitize: deps
	@cmake --preset ubsan >/dev/null
	@cmake --build build/ubsan -j $(JOBS) --target unit_tests
	@cd build/ubsan && ctest -j $(JOBS) --output-on-failure -L unit

# clang-tidy's curated checks (.clang-tidy) over every source in src/, on the release
# build's compile database; fails naming each finding (tools/check_tidy.sh).
.PHONY: tidy
tidy: build
	@scripts/install-deps.sh tidy
	@tools/check_tidy.sh $(BUILD)

# The shared-memory protocols under ThreadSanitizer: the container region, the enforcer's
# books, the host's readers and the simulator's node and timeline, whose tests race threads.
TSAN_TESTS := region_test shared_pieces_test turn_test allocations_test limiter_core_test host_test sim_core_test
.PHONY: test-tsan
test-tsan: deps
	@cmake --preset tsan >/dev/null
	@cmake --build build/tsan -j $(JOBS) --target $(TSAN_TESTS)
	@cd build/tsan && ctest -j $(JOBS) --output-on-failure -L unit -E _NOT_BUILT  # only TSAN_TESTS are built here

# End-to-end against a real Kubernetes v1.20.2 built from Debian's source package (first run
# 6-17 min extra on 2 cores, then cached in /var/cache/gpuslice): docs/e2e.md. Root only.
.PHONY: e2e
e2e: build
	@scripts/install-deps.sh e2e
	@tests/e2e/run.sh $(BUILD)

# Scheduling throughput through a real kube-scheduler v1.20.2 + API server with 5000 Node
# objects (no kubelets) and 1000 pods, with and without `gpuslice scheduler` as extender:
# bench/cluster/throughput.sh (knobs NODES, PODS, REPEAT, SHAPES, ... there). Prints figures.
.PHONY: bench-cluster
bench-cluster: build
	@scripts/install-deps.sh e2e
	@bench/cluster/throughput.sh $(BUILD)

# libFuzzer targets for every parser of outside input (docs/fuzzing.md): clang with
# ASan+UBSan, each target over its corpus and regressions, then FUZZ_SECONDS of fuzzing.
FUZZ_SECONDS ?= 20
.PHONY: fuzz
fuzz:
	@scripts/install-deps.sh fuzz
	@cmake --preset fuzz >/dev/null
	@cmake --build build/fuzz -j $(JOBS) --target fuzzers
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=2 fuzz/run.sh build/fuzz

# The minimal build (as tests/gpu/run.sh makes it on GPU machines: Ubuntu 24.04, GCC 13) with
# a newer GCC from a Debian trixie chroot and -Werror: catches includes that GCC 12's
# libstdc++ supplied transitively. Root and Debian's archive; ~10 min the first time.
.PHONY: check-newer-gcc
check-newer-gcc:
	@JOBS=$(JOBS) scripts/check-newer-gcc.sh

demo: build
	@scripts/demo.sh $(BUILD)

bench: build
	@root=$$(mktemp -d) && $(BUILD)/bin/gpuslice sim up --gpus 1xH100-80GB --root $$root >/dev/null && \
	  eval "$$($(BUILD)/bin/gpuslice sim env --root $$root)" && \
	  GS_ENFORCER=$(CURDIR)/$(BUILD)/enforcer/libgpuslice.so $(BUILD)/bench/gpuslice_bench; \
	  rc=$$?; $(BUILD)/bin/gpuslice sim down --root $$root >/dev/null; rm -rf $$root; [ $$rc -eq 0 ] || exit $$rc
	@GS_BUILD_DIR=$(CURDIR)/$(BUILD) $(BUILD)/bench/node_allocate_bench
	@GS_BUILD_DIR=$(CURDIR)/$(BUILD) $(BUILD)/bench/container_startup_bench

# What gpuslice's hook adds to `docker run` (bench/docker_start.cc): a private dockerd on a
# simulated node, root only; GS_DOCKER_RUNS runs of each kind (default 20). Prints figures.
.PHONY: bench-docker
bench-docker: build
	@scripts/install-deps.sh test
	@GS_BUILD_DIR=$(CURDIR)/$(BUILD) $(BUILD)/bench/docker_start_bench

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build
