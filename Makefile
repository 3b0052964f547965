# A thin layer over CMake. `make demo` and `make test` work on a fresh Debian 12
# machine (they install what is missing) and again on one that has it all.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
WERROR     ?= $(if $(CI),ON,OFF)

DEB_PACKAGES = build-essential cmake pkg-config libyaml-dev libhdf5-dev hdf5-tools \
               liblz4-dev libzstd-dev libcmocka-dev libpng-dev zlib1g-dev libfftw3-dev clang \
               libclang-rt-14-dev python3 python3-h5py python3-numpy bitshuffle util-linux

.PHONY: all deps build build-asan demo test test-asan bench fuzz clean

all: build

# Installs only what is missing; needs root (or sudo) only when something is.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS) -DSLUICE_WERROR=$(WERROR)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

$(BUILD_ASAN)/CMakeCache.txt:
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON -DSLUICE_WERROR=$(WERROR)

build-asan: deps $(BUILD_ASAN)/CMakeCache.txt
	cmake --build $(BUILD_ASAN) -j $(JOBS)

demo: build
	@bash tests/data/make_demo.sh $(BUILD)/sluice

test: build build-asan
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -LE slow

bench: build
	$(BUILD)/bench_engine_overhead

# libFuzzer binaries (clang): make fuzz, then e.g. build-fuzz/tests/fuzz_pipeline corpus/
fuzz: deps
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSLUICE_FUZZ=ON
	cmake --build build-fuzz -j $(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) build-fuzz
