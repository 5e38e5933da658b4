# Thin driver over CMake; installs the Debian dependencies on first use.
BUILD ?= build
JOBS ?= $(shell nproc)
DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all build test autotune deps format clean

all: build

$(DEPS_STAMP): scripts/install-deps.sh
	@bash scripts/install-deps.sh
	@mkdir -p $(BUILD) && touch $@

deps: $(DEPS_STAMP)

$(BUILD)/CMakeCache.txt: $(DEPS_STAMP) CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

# The main job: the best plan for gpt2-small on one dgx-a100-80g node over the default
# space, written to plan/.
autotune: build
	$(BUILD)/autopar autotune

format:
	find include src cost_models search tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
