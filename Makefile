# qkv: `make demo` and `make test` do everything on a fresh machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup models data configure build demo test bench clean

all: build

setup:
	@bash scripts/setup.sh

# Pretrained models (git-ignored models/; downloaded once, skipped when present).
models: setup
	@bash scripts/fetch_models.sh

# Text corpora (git-ignored data/; made from Debian's bible-kjv once, skipped when present).
data: setup
	@bash scripts/fetch_data.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

demo: models data build
	@$(BUILD)/tools/qkv/qkv demo

test: models data build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	@$(BUILD)/bench/qkv_bench

clean:
	rm -rf $(BUILD)
