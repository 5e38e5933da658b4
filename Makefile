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

# The main job. Until the search engine exists it runs the deepest part of the
# pipeline that does: build the default model and inspect it.
autotune: build
	$(BUILD)/autopar zoo gpt2-small -o $(BUILD)/gpt2-small.onnx
	$(BUILD)/autopar inspect $(BUILD)/gpt2-small.onnx --batch 8

format:
	find include src cost_models search tests bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
