# Top-level driver: `make demo` and `make test` each install what is missing,
# build and run (README). BUILD_DIR can be overridden.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
PYTHON ?= /usr/bin/python3

.PHONY: setup configure build demo test test-sanitize test-tsan bench fuzz install clean

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

# Unit tests under ASan+UBSan (issue 2/4), in their own build tree.
test-sanitize: setup
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCGDR_SANITIZE=ON -DCGDR_PYTHON=OFF -DCGDR_BENCH=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS) -L unit

bench: build
	@$(BUILD_DIR)/cgdr bench

install: build
	@cmake --install $(BUILD_DIR)

clean:
	@rm -rf $(BUILD_DIR) build-asan build-tsan build-fuzz
