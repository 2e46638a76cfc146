# softsync: build, test, benchmark.
#
#   make              build bin/softsync
#   make run          install missing system packages, softsync doctor, then a short LeNet
#                     training on MNIST (2 epochs, progress bar and end report)
#   make train-mnist  LeNet on MNIST, one learner, 10 epochs; fails above 1.0% test error
#   make train-mnist-dist  LeNet on MNIST, 8 learners × batch 8, 8-softsync, lr-mode
#                     staleness, 10 epochs; fails above 1.2% test error
#   make test         deps, C tests (plain and under ASan/UBSan), go vet, go test -race,
#                     the learning tests on the native engine without -race,
#                     and a pure-Go pass (CGO_ENABLED=0)
#   make bench        kernel benchmarks (go test -bench), softsync bench gemm and bench train
#   make repro-quick  the paper's accuracy table (softsync repro --quick), MNIST and
#                     Fashion-MNIST, into build/repro/*-quick (REPRO_FLAGS, default --sim)
#   make repro        the same with the full schedule (long), into build/repro/*
#   make profile      a CPU profile (PROFILE=cpu|mem|block|mutex|trace) of a short LeNet
#                     training, 2 learners, into build/profile
#   make deps         apt-get install what is missing (as root; prints the command otherwise)
#   make check-memory C tests under AddressSanitizer and UndefinedBehaviorSanitizer
#   make fuzz         native-vs-reference differential fuzzing (FUZZTIME, default 10s)
#   make csrc-hash    refresh kernels/csrc_hash.go after editing csrc/
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO ?= go
# Debian packages the build and the tests need.
DEB_PACKAGES := gcc make cmake pkg-config libopenblas-dev libibverbs-dev ca-certificates git
# Packages whose tests run under the race detector, and those also tested
# without cgo (the pure-Go reference engine).
RACE_PKGS ?= ./...
NOBLAS_PKGS ?= ./...
FUZZTIME ?= 10s
BENCHTIME ?= 1s
PROFILE ?= cpu
# softsync repro's mode: --sim (deterministic simulator) or empty (real learners).
REPRO_FLAGS ?= --sim
REPRO_DATA := mnist fashion-mnist

# OpenBLAS's libdir, recorded in the binary as the fallback dlopen path.
# Recursive (=) so that it is read after `make deps` has installed pkg-config.
OPENBLAS_LIBDIR = $(shell pkg-config --variable=libdir openblas 2>/dev/null)
LDFLAGS = -X github.com/softsync/softsync/kernels.buildLibDir=$(OPENBLAS_LIBDIR)
CSRC := $(shell ls csrc/*.c csrc/*.h | LC_ALL=C sort)

.PHONY: build run train-mnist train-mnist-dist test bench profile repro repro-quick deps deps-fashion-mnist check-memory test-c fuzz csrc-hash clean

build: csrc-hash
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/softsync ./tools/softsync

run: deps build
	bin/softsync doctor
	bin/softsync train --model lenet --data mnist --epochs 2

# Reports and plots of the accuracy runs go to build/.
train-mnist: deps build
	@mkdir -p build
	bin/softsync train --model lenet --data mnist --epochs 10 \
		--json build/train-mnist.json --plot build/train-mnist.png --save build/lenet-mnist.weights \
		--expect-error 0.010

train-mnist-dist: deps build
	@mkdir -p build
	bin/softsync train --model lenet --data mnist --epochs 10 --learners 8 --batch 8 \
		--protocol softsync --n 8 --lr-mode staleness \
		--json build/train-mnist-dist.json --plot build/train-mnist-dist.png \
		--expect-error 0.012

test: deps csrc-hash test-c check-memory
	$(GO) vet ./...
	$(GO) test -race -ldflags '$(LDFLAGS)' $(RACE_PKGS)
	# the learning tests skip under the race detector: run them on the native engine too
	$(GO) test -run 'TestLearn' -ldflags '$(LDFLAGS)' ./learner/nn/
	CGO_ENABLED=0 $(GO) vet $(NOBLAS_PKGS)
	CGO_ENABLED=0 $(GO) test $(NOBLAS_PKGS)

bench: deps build
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -ldflags '$(LDFLAGS)' ./kernels/
	bin/softsync bench gemm
	bin/softsync bench train --model lenet --batch 64
	bin/softsync bench train --model lenet --batch 8
	bin/softsync bench train --model lenet --batch 8 --learners 2
	bin/softsync bench train --model cifar10_full --batch 100

# The accuracy table on each data set (docs/repro.md).
repro-quick: deps deps-fashion-mnist build
	@mkdir -p build/repro
	for d in $(REPRO_DATA); do bin/softsync repro --quick $(REPRO_FLAGS) --data $$d --out build/repro/$$d-quick; done

repro: deps deps-fashion-mnist build
	@mkdir -p build/repro
	for d in $(REPRO_DATA); do bin/softsync repro $(REPRO_FLAGS) --data $$d --out build/repro/$$d; done

# A profile of training: 2 learners × batch 8 under 2-softsync, 3,000 steps.
profile: deps build
	@mkdir -p build/profile
	bin/softsync train --model lenet --data mnist --epochs 1 --max-steps 1500 --learners 2 --batch 8 \
		--protocol softsync --test-subset 2000 --quiet --profile $(PROFILE) --profile-dir build/profile
	@if [ "$(PROFILE)" = trace ]; then echo "read it with: go tool trace build/profile/trace.out"; \
	else echo "read it with: go tool pprof -top bin/softsync build/profile/$(PROFILE).pprof"; fi

fuzz: csrc-hash
	$(GO) test -run '^$$' -fuzz FuzzNativeVsReference -fuzztime $(FUZZTIME) -ldflags '$(LDFLAGS)' ./kernels/

deps: PKGS = $(DEB_PACKAGES)
deps-fashion-mnist: PKGS = dataset-fashion-mnist
deps deps-fashion-mnist:
	@missing=$$(for p in $(PKGS); do \
		dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q '^install ok installed$$' || echo "$$p"; \
	done | xargs); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	cmd="apt-get update && apt-get install -y --no-install-recommends $$missing"; \
	if [ "$$(id -u)" -ne 0 ]; then \
		echo "softsync needs: $$missing. Install them as root:" >&2; \
		echo "  sudo sh -c '$$cmd'" >&2; exit 1; \
	fi; \
	echo "installing: $$missing"; \
	export DEBIAN_FRONTEND=noninteractive; sh -c "$$cmd"

test-c:
	cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/release -j2
	ctest --test-dir build/release --output-on-failure

check-memory:
	cmake -S . -B build/asan -DSOFTSYNC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build build/asan -j2
	ctest --test-dir build/asan --output-on-failure

# kernels/csrc.c compiles csrc/ from outside the package, which the go
# command's cache does not track; kernels/csrc_hash.go does (a test checks it).
csrc-hash:
	@h=$$(cat $(CSRC) | sha256sum | cut -c1-64); \
	grep -q "$$h" kernels/csrc_hash.go || sed -i "s/^const csrcHash = .*/const csrcHash = \"$$h\"/" kernels/csrc_hash.go

clean:
	rm -rf bin build
