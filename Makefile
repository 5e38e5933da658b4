# Thin driver over CMake; installs the Debian dependencies on first use.
BUILD ?= build
JOBS ?= $(shell nproc)
DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all build python test test-asan test-tsan fuzz autotune deps format clean

all: build

$(DEPS_STAMP): scripts/install-deps.sh
	@bash scripts/install-deps.sh
	@mkdir -p $(BUILD) && touch $@

deps: $(DEPS_STAMP)

$(BUILD)/CMakeCache.txt: $(DEPS_STAMP) CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The Python module alone: build/python/autopar (PYTHONPATH=build/python python3 -c 'import autopar').
python: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target autopar_python

# The whole suite, then, where clang is installed, a few seconds of each fuzz target (a
# sanitizer build of its own, $(ASAN_BUILD)).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600
	@if command -v clang++ >/dev/null 2>&1; then \
	  FUZZ_BUILD=$(ASAN_BUILD) JOBS=$(JOBS) bash scripts/fuzz.sh $(FUZZ_SECONDS); \
	else echo "make test: clang++ not found; the fuzz targets did not run"; fi

# Sanitizer builds (clang): ASan + UBSan over the unit, errors, fuzz and numerics tests (the
# build the fuzz targets share), and TSan over what runs threads: the inproc communicator, the
# plan runner and verify, the parallel search, the CLI's runs.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_SECONDS ?= 3
SANITIZER_CMAKE = CC=clang CXX=clang++ cmake -S . -DCMAKE_BUILD_TYPE=Release -DAUTOPAR_CUDA=OFF
ASAN_TESTS = autopar autopar_unit_tests autopar_errors_tests autopar_fuzz_tests \
  autopar_numerics_tests fuzz_replays fuzzers
TSAN_TESTS = autopar autopar_unit_tests autopar_numerics_tests autopar_integration_tests
TSAN_SELECTION = (Communicator|VerifyPlan|Search|Determinism|PlanProperty|RuntimeCli)\.

$(ASAN_BUILD)/CMakeCache.txt: $(DEPS_STAMP) CMakeLists.txt
	$(SANITIZER_CMAKE) -B $(ASAN_BUILD) -DAUTOPAR_SANITIZE=address -DAUTOPAR_FUZZ=ON

# TSan needs a libtbb built with it (scripts/build-tsan-tbb.sh: Debian's source, about 4 min).
TSAN_TBB ?= $(TSAN_BUILD)/tsan-tbb

$(TSAN_TBB)/version: $(DEPS_STAMP) scripts/build-tsan-tbb.sh
	JOBS=$(JOBS) bash scripts/build-tsan-tbb.sh $(abspath $(TSAN_TBB))

$(TSAN_BUILD)/CMakeCache.txt: $(DEPS_STAMP) CMakeLists.txt $(TSAN_TBB)/version
	$(SANITIZER_CMAKE) -B $(TSAN_BUILD) -DAUTOPAR_SANITIZE=thread \
	  -DAUTOPAR_TSAN_TBB=$(abspath $(TSAN_TBB))/lib

test-asan: $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target $(ASAN_TESTS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 1200 -L 'unit|errors|fuzz|numerics'

test-tsan: $(TSAN_BUILD)/CMakeCache.txt
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TESTS)
	cd $(TSAN_BUILD) && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  ctest --output-on-failure -j $(JOBS) --timeout 1200 -R '$(TSAN_SELECTION)'

# A longer fuzz run: make fuzz FUZZ_SECONDS=600
fuzz: $(ASAN_BUILD)/CMakeCache.txt
	FUZZ_BUILD=$(ASAN_BUILD) JOBS=$(JOBS) bash scripts/fuzz.sh $(FUZZ_SECONDS)

# The main job: the best plan for gpt2-small on one dgx-a100-80g node over the default
# space, written to plan/.
autotune: build
	$(BUILD)/autopar autotune

format:
	find include src cost_models search tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
