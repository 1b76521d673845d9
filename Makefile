# The two commands a new user needs: `make bench` and `make test`.
# Everything else builds on these targets; CMake does the real work.
BUILD        ?= build
JOBS         ?= $(shell nproc)
CMAKE_FLAGS  ?=
PREFIX       ?= /usr/local

.PHONY: all build install uninstall test test-sanitize bench bench-instr bench-compare deps bench-deps clean

all: build

deps:
	@sh scripts/deps.sh build

bench-deps:
	@sh scripts/deps.sh bench

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

# make install [PREFIX=/usr/local] [DESTDIR=/staging]: libraries, header,
# launcher, hakmem.pc and the CMake package. make uninstall removes what
# the last install listed (build/install_manifest.txt), under the same DESTDIR.
install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

uninstall:
	DESTDIR="$(DESTDIR)" cmake -DMANIFEST=$(BUILD)/install_manifest.txt -P cmake/uninstall.cmake

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite on the debug build (assertions and validators inside the
# allocator), then ASan+UBSan over the tests, then TSan over the allocator's
# own concurrency (allocator instrumented and linked into the threaded
# tests); both sanitizer builds are debug builds too.
test-sanitize: deps
	cmake -S . -B $(BUILD)-debug -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHAKMEM_DEBUG=ON
	cmake --build $(BUILD)-debug -j $(JOBS)
	cd $(BUILD)-debug && ctest --output-on-failure -j $(JOBS)
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DHAKMEM_SANITIZE=address -DHAKMEM_DEBUG=ON
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS) -L sanitize
	cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHAKMEM_SANITIZE=thread -DHAKMEM_DEBUG=ON
	cmake --build $(BUILD)-tsan -j $(JOBS)
	cd $(BUILD)-tsan && ctest --output-on-failure -j $(JOBS) -L tsan

bench: bench-deps build
	python3 bench/run.py $(if $(QUICK),--quick,)

bench-instr: bench-deps build
	python3 bench/instr.py

bench-compare:
	python3 bench/compare.py $(A) $(B)

clean:
	rm -rf $(BUILD) $(BUILD)-debug $(BUILD)-asan $(BUILD)-tsan
