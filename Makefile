# qkv: `make demo` and `make test` do everything on a fresh machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all setup models data configure build tool install demo test test-python bench clean test-tsan test-asan fuzz-smoke

all: build

setup:
	@bash scripts/setup.sh

# Pretrained models (git-ignored models/; downloaded once, skipped when present).
models: setup
	@bash scripts/fetch_models.sh

# Text corpora (git-ignored data/; made from Debian's bible-kjv once, skipped when present).
data: setup
	@bash scripts/fetch_data.sh

# Compiled objects are reused through ccache when it is there (as .ci/run does).
CCACHE := $(if $(shell command -v ccache),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache,)
PREFIX ?= /usr/local

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CCACHE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The tool and the libraries it links, nothing else (the tests are built by make test).
tool: configure
	@cmake --build $(BUILD) -j $(JOBS) --target qkv_tool

demo: models data tool
	@$(BUILD)/tools/qkv/qkv demo

# The qkv binary into $(PREFIX)/bin, the library, headers and CMake package beside it.
install: tool
	@cmake --install $(BUILD) --prefix $(PREFIX)

test: models data build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The Python package: pip install . into build-venv (made here, filled from PyPI), then
# pytest (python/tests; parity with $(BUILD)'s qkv CLI), mypy and the example (scripts/test_python.sh).
test-python: models data build
	@CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) bash scripts/test_python.sh $(BUILD)

# ThreadSanitizer over the concurrency tests (label `concurrency`: one model serving 8 threads,
# threaded kernels from 8 user threads, the thread pool's own tests) in $(TSAN_BUILD). Builds
# only those tests, at -O1 (the kernels at -O2) with line tables, to keep the instrumented build
# short; any report fails the target (halt_on_error, and any file in tsan-logs/).
# ThreadPool.WorksInAForkedChild is left to `make test`: TSan cannot start threads in the child
# of a multi-threaded fork ("starting new threads after multi-threaded fork is not supported").
TSAN_BUILD ?= build-tsan
TSAN_TESTS := test_concurrent test_concurrent_kernels test_parallel test_scheduler
test-tsan: models
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQKV_SANITIZE=thread \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DQKV_OPT_KERNELS=-O2 -DQKV_OPT_LIBRARY=-O1 -DQKV_OPT_FRONTENDS=-O1 \
	  -DQKV_BUILD_TOOLS=OFF -DQKV_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TESTS)
	@rm -rf $(TSAN_BUILD)/tsan-logs && mkdir -p $(TSAN_BUILD)/tsan-logs
	@cd $(TSAN_BUILD) && rc=0 && \
	  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 log_path=$(abspath $(TSAN_BUILD))/tsan-logs/report" \
	  ctest -L concurrency -E 'ThreadPool\.WorksInAForkedChild' --output-on-failure -j $(JOBS) --timeout 1800 || rc=$$?; \
	  if [ -n "$$(ls tsan-logs)" ]; then cat tsan-logs/*; echo "test-tsan: ThreadSanitizer reports (above, in $(TSAN_BUILD)/tsan-logs)"; exit 1; fi; \
	  exit $$rc

# AddressSanitizer + UndefinedBehaviorSanitizer over the whole CTest suite, in $(ASAN_BUILD).
# Built with clang (half GCC's build time with the sanitizers on): the library at -O1, the
# kernels at -O2, tests and tools at -O0 (their build 985 instead of 1522 CPU-s at -O1, their run
# ~840 -> ~1060 s: about even), line tables only. Any report fails the target: UB is fatal
# (-fno-sanitize-recover), ASan halts on the first error, and every report of any process (the
# tests and the qkv binaries they run) is written to asan-logs/, which must stay empty.
# QKV_TEST_REDUCED=1: the tests too slow under the sanitizers run in reduced size (never skipped).
# The same build holds the libFuzzer targets of `make fuzz-smoke` (QKV_BUILD_FUZZERS).
ASAN_BUILD ?= build-asan
ASAN_CXX ?= clang++-14
ASAN_SYMBOLIZER := $(firstword $(wildcard /usr/lib/llvm-14/bin/llvm-symbolizer) $(shell command -v llvm-symbolizer))
FUZZ_TARGETS := fuzz_safetensors fuzz_checkpoint fuzz_model_folder fuzz_bpe fuzz_wordpiece fuzz_gguf fuzz_tokenizer fuzz_chat_template fuzz_openai fuzz_make_seeds
FUZZ_SECONDS ?= 60
define asan_configure
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=$(ASAN_CXX) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DQKV_OPT_KERNELS=-O2 -DQKV_OPT_LIBRARY=-O1 \
	  -DQKV_OPT_FRONTENDS=-O0 \
	  -DQKV_SANITIZE=address,undefined -DQKV_BUILD_FUZZERS=ON -DQKV_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
endef
test-asan: models data
	$(asan_configure)
	@cmake --build $(ASAN_BUILD) -j $(JOBS)
	@for sym in __asan_init __ubsan_handle; do nm $(ASAN_BUILD)/tests/test_tensor | grep -q $$sym || \
	  { echo "test-asan: $(ASAN_BUILD)/tests/test_tensor has no $$sym: not built with the sanitizers"; exit 1; }; done
	@rm -rf $(ASAN_BUILD)/asan-logs && mkdir -p $(ASAN_BUILD)/asan-logs
	@cd $(ASAN_BUILD) && rc=0 && logs=$(abspath $(ASAN_BUILD))/asan-logs && \
	  QKV_TEST_REDUCED=1 ASAN_SYMBOLIZER_PATH=$(ASAN_SYMBOLIZER) \
	  ASAN_OPTIONS="halt_on_error=1 detect_leaks=1 check_initialization_order=1 strict_init_order=1 log_path=$$logs/asan" \
	  UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 log_path=$$logs/ubsan" \
	  ctest --output-on-failure -j $(JOBS) --timeout 1800 || rc=$$?; \
	  if [ -n "$$(ls asan-logs)" ]; then cat asan-logs/*; echo "test-asan: sanitizer reports (above, in $(ASAN_BUILD)/asan-logs)"; exit 1; fi; \
	  exit $$rc

# libFuzzer targets of the parsers (fuzz/: safetensors, checkpoints, model folders and their
# config.json readers, byte-level BPE, WordPiece, GGUF), each run $(FUZZ_SECONDS) s under ASan + UBSan
# from its seeds; any crash, leak, hang or report fails (scripts/fuzz_smoke.sh prints a table).
fuzz-smoke: setup
	$(asan_configure)
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)
	@bash scripts/fuzz_smoke.sh $(ASAN_BUILD) $(FUZZ_SECONDS) $(JOBS)

bench: build
	@$(BUILD)/bench/qkv_bench

clean:
	rm -rf $(BUILD)
