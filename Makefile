# softsync build (extended below in later steps).
SHELL := /bin/bash
CSRC := $(shell ls csrc/*.c csrc/*.h | LC_ALL=C sort)

.PHONY: csrc-hash test-c check-memory
csrc-hash:
	@h=$$(cat $(CSRC) | sha256sum | cut -c1-64); \
	grep -q "$$h" kernels/csrc_hash.go 2>/dev/null || sed -i "s/^const csrcHash = .*/const csrcHash = \"$$h\"/" kernels/csrc_hash.go

test-c:
	cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/release -j2
	ctest --test-dir build/release --output-on-failure

check-memory:
	cmake -S . -B build/asan -DSOFTSYNC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build build/asan -j2
	ctest --test-dir build/asan --output-on-failure
