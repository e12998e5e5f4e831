# qkv: `make demo` and `make test` do everything on a fresh machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup models configure build demo test bench clean

all: build

setup:
	@bash scripts/setup.sh

# Pretrained models (git-ignored models/; downloaded once, skipped when present).
models: setup
	@bash scripts/fetch_models.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: models build
	@$(BUILD)/tools/qkv/qkv demo

test: models build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	@$(BUILD)/bench/qkv_bench

clean:
	rm -rf $(BUILD)
