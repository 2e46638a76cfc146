# softsync: build, test, benchmark.
#
#   make              build bin/softsync
#   make run          install missing system packages, softsync doctor, then a short LeNet
#                     training on MNIST (2 epochs, progress bar and end report)
#   make train-mnist  LeNet on MNIST, one learner, 10 epochs; fails above 1.0% test error
#   make train-mnist-dist  LeNet on MNIST, 8 learners × batch 8, 8-softsync, lr-mode
#                     staleness, 10 epochs; fails above 1.2% test error
#   make test         deps and deps-test, C tests (plain and under ASan/UBSan), go vet, go test -race
#                     (RACE_PKGS), the tests that skip under it (learning, computations
#                     without goroutines, multi-process jobs) natively, and a pure-Go pass
#                     (CGO_ENABLED=0)
#   make bench        every benchmark beside its reference (softsync bench all: peak,
#                     gemm, training against PyTorch, transport against iperf3, speedup;
#                     go test -bench of the convolution, memory-bound and solver kernels)
#                     into bench/results.json and bench/summary.md, and the tables of
#                     docs/performance.md (installs iperf3 and python3-torch; BENCH_FLAGS)
#   make repro-quick  the paper's accuracy table (softsync repro --quick), MNIST and
#                     Fashion-MNIST, into build/repro/*-quick (REPRO_FLAGS, default --sim)
#   make repro        the same with the full schedule (long), into build/repro/*
#   make repro-rules-quick  the staleness rules compared (softsync repro --rules --quick),
#                     MNIST and Fashion-MNIST, into build/repro/rules-*-quick
#   make repro-rules  the same with the full schedule (long), into build/repro/rules-*
#   make profile      a CPU profile (PROFILE=cpu|mem|block|mutex|trace) of a short LeNet
#                     training, 2 learners, into build/profile
#   make deps         apt-get install what is missing (as root; prints the command otherwise)
#   make deps-bench   the same for the references of make bench (iperf3, python3-torch)
#   make deps-test    the same for what make test checks ONNX exports with (python3-onnx,
#                     python3-torch)
#   make check-memory C tests under AddressSanitizer and UndefinedBehaviorSanitizer
#   make chaos-sim    SEEDS (default 10000) seeded jobs of the chaos simulator: every
#                     role's core (coordinator, shard server, learner, evaluator, the
#                     ps client and shards) in virtual time over a simulated network and
#                     disk; kills and restarts at any message, pauses, resets, slow and
#                     lossy links, a full disk; each seed's job also through the shipped
#                     runtimes (every goroutine of StartProcess, testing/synctest's virtual
#                     time, one fault per job; CHAOS_RUNTIME_EVERY=N: every N-th seed's, 0:
#                     none); its last line is "chaos: N seeds (R through
#                     the runtimes), F failed, H hung, K known, S seeds/s" (make test runs
#                     300, 100 under -race, and make chaos-defects)
#   make chaos-defects  the chaos simulator with four fixed defects put back, one at a
#                     time (build tag simdefects): each must be found within 300 seeds
#   make chaos        make chaos-sim, then the failure tests' job under softsync launch
#                     CHAOS_RUNS times (default 20) per role killed at a random moment
#                     (a learner, a shard server, the head; CHAOS_ROLES=learner,ps,eval
#                     selects them; CHAOS_SEED), each against the
#                     same job undisturbed; then alexnet with 2 learner processes and
#                     2 shard servers over shm and TCP, with and without bf16, a shard
#                     server killed and restarted, and a job killed and resumed
#                     (about 15 minutes; 4.1 GiB)
#   make fuzz         every fuzz target (FUZZ=regexp: those matching) for FUZZTIME each
#                     (default 10s); keeps the inputs that found new coverage in
#                     testdata/fuzz/ (commit them); then TestHalfKernelsExhaustive
#                     (rdma's fp16/bf16 kernels on every float32, about a minute a level)
#   make csrc-hash    refresh kernels/csrc_hash.go and rdma/internal/verbs/csrc_hash.go
#                     after editing csrc/
#
# When pkg-config finds libibverbs (libibverbs-dev), Go builds and tests use
# the verbs build tag: the verbs transport's cgo binding (rdma/internal/verbs)
# is compiled in, and libibverbs.so.1 is loaded at run time. Without it, or
# with CGO_ENABLED=0, the verbs transport reports itself unsupported.
# Likewise, when pkg-config finds libturbojpeg and libjpeg (libturbojpeg0-dev,
# libjpeg62-turbo-dev), the turbojpeg tag links libjpeg-turbo into the data
# pipeline (learner/data/internal/turbo); without it JPEGs are decoded by
# Go's image/jpeg, several times slower.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO ?= go
# Debian packages the build and the tests need. The multi-process tests
# (tools/softsync/internal/clustertest, docs/cluster.md) start real jobs
# under Open MPI, MPICH and a throw-away Slurm, and shape links between
# network namespaces with ip and tc (iproute2).
DEB_PACKAGES := gcc make cmake pkg-config libopenblas-dev libibverbs-dev libturbojpeg0-dev libjpeg62-turbo-dev ca-certificates git \
	openmpi-bin mpich slurmctld slurmd slurm-client iproute2
# Packages whose tests run under the race detector, and those also tested
# without cgo (the pure-Go reference engine). The race pass leaves out the
# simulators of ps/sim: deterministic computation without goroutines or
# cgo, which the CGO_ENABLED=0 pass runs without the detector.
RACE_PKGS ?= $$($(GO) list ./... | grep -v '/ps/sim\(/\|$$\)')
NOBLAS_PKGS ?= ./...
FUZZTIME ?= 10s
FUZZ ?= .
BENCHTIME ?= 1s
# Flags of softsync bench all in make bench (e.g. --quick, --repeat 1).
BENCH_FLAGS ?=
# The references make bench measures softsync against.
BENCH_PACKAGES := iperf3 python3-torch python3-torchvision
# What the tests check softsync's output with: ONNX's checker and PyTorch
# (learner/nn/onnx runs the exported models).
TEST_PACKAGES := python3-onnx python3-torch
PROFILE ?= cpu
# softsync repro's mode: --sim (deterministic simulator) or empty (real learners).
REPRO_FLAGS ?= --sim
REPRO_DATA := mnist fashion-mnist

# OpenBLAS's libdir, recorded in the binary as the fallback dlopen path.
# Recursive (=) so that it is read after `make deps` has installed pkg-config.
OPENBLAS_LIBDIR = $(shell pkg-config --variable=libdir openblas 2>/dev/null)
LDFLAGS = -X github.com/softsync/softsync/kernels.buildLibDir=$(OPENBLAS_LIBDIR)
# The verbs build tag, when libibverbs' headers are installed, and the
# turbojpeg tag, when libjpeg-turbo's libraries are (recursive, like
# OPENBLAS_LIBDIR).
TAGS = $(strip $(shell pkg-config --exists libibverbs 2>/dev/null && echo verbs) \
	$(shell pkg-config --exists libturbojpeg libjpeg 2>/dev/null && echo turbojpeg))
CSRC := $(shell ls csrc/*.c csrc/*.h | LC_ALL=C sort)
CSRC_VERBS := $(shell ls csrc/verbs/*.c csrc/verbs/*.h | LC_ALL=C sort)

.PHONY: build run train-mnist train-mnist-dist test bench profile repro repro-quick repro-rules repro-rules-quick deps deps-bench deps-test deps-fashion-mnist check-memory test-c fuzz chaos chaos-sim chaos-defects csrc-hash clean

build: csrc-hash
	$(GO) build -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o bin/softsync ./tools/softsync

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

# With SOFTSYNC_REQUIRE_LAUNCHERS=1 the multi-process tests fail, instead of
# skipping, when a launcher or root is missing, and the ONNX test when
# python3-onnx or python3-torch is: CI cannot pass by skipping.
test: export SOFTSYNC_REQUIRE_LAUNCHERS = 1
test: deps deps-test csrc-hash test-c check-memory
	$(GO) vet -tags '$(TAGS)' ./...
	$(GO) test -race -tags '$(TAGS)' -ldflags '$(LDFLAGS)' $(RACE_PKGS)
	$(MAKE) chaos-defects
	# the tests that skip under the race detector, natively, in one go test so that
	# its packages run side by side: the learning tests, the computations without
	# goroutines (nativeOnly: in kernels/kerneltest the cases of more than 2M
	# multiply-adds), and tools/softsync's jobs of several processes (launchers,
	# namespaces, failures); one line: TestNativeOnlyRunByMake reads it
	$(GO) test -run 'TestLearn|TestSyntheticData|TestControlMessagesFit|TestEngines$$|TestNative(Parallel|Wgrad|ConvPlans)$$|TestLaunchers|TestLaunch$$|TestCluster|TestTwoHosts|TestFailures|TestSimPreset' -tags '$(TAGS)' -ldflags '$(LDFLAGS)' ./learner/nn/ ./learner/cluster/ ./kernels/ ./tools/softsync/
	CGO_ENABLED=0 $(GO) vet $(NOBLAS_PKGS)
	CGO_ENABLED=0 $(GO) test $(NOBLAS_PKGS)

# The go test -bench results (one thread per kernel, per level) are merged
# into bench/results.json by softsync bench all, beside this run's peak.
bench: deps deps-bench build
	@mkdir -p build/bench
	$(GO) test -run '^$$' -bench 'Conv/native-avx.*-1thread/./^(fwd|bwd)$$' -benchtime $(BENCHTIME) -ldflags '$(LDFLAGS)' ./kernels/ > build/bench/go-bench.txt
	$(GO) test -run '^$$' -bench 'Layers' -benchtime $(BENCHTIME) -ldflags '$(LDFLAGS)' ./kernels/ >> build/bench/go-bench.txt
	$(GO) test -run '^$$' -bench 'Update/n=431080$$/^(c=1|memmove)$$' -benchtime $(BENCHTIME) ./ps/sgd/ >> build/bench/go-bench.txt
	$(GO) test -run '^$$' -bench 'FirstNonFinite' -benchtime $(BENCHTIME) ./ps/sgd/ >> build/bench/go-bench.txt
	bin/softsync bench all --out bench --go-bench build/bench/go-bench.txt --doc docs/performance.md $(BENCH_FLAGS)

# The accuracy table on each data set (docs/repro.md).
repro-quick: deps deps-fashion-mnist build
	@mkdir -p build/repro
	for d in $(REPRO_DATA); do bin/softsync repro --quick $(REPRO_FLAGS) --data $$d --out build/repro/$$d-quick; done

repro: deps deps-fashion-mnist build
	@mkdir -p build/repro
	for d in $(REPRO_DATA); do bin/softsync repro $(REPRO_FLAGS) --data $$d --out build/repro/$$d; done

# The staleness rules compared on each data set, in the simulator (docs/repro.md).
repro-rules-quick: deps deps-fashion-mnist build
	@mkdir -p build/repro
	for d in $(REPRO_DATA); do bin/softsync repro --rules --quick --data $$d --out build/repro/rules-$$d-quick; done

repro-rules: deps deps-fashion-mnist build
	@mkdir -p build/repro
	for d in $(REPRO_DATA); do bin/softsync repro --rules --data $$d --out build/repro/rules-$$d; done

# A profile of training: 2 learners × batch 8 under 2-softsync, 3,000 steps.
profile: deps build
	@mkdir -p build/profile
	bin/softsync train --model lenet --data mnist --epochs 1 --max-steps 1500 --learners 2 --batch 8 \
		--protocol softsync --test-subset 2000 --quiet --profile $(PROFILE) --profile-dir build/profile
	@if [ "$(PROFILE)" = trace ]; then echo "read it with: go tool trace build/profile/trace.out"; \
	else echo "read it with: go tool pprof -top bin/softsync build/profile/$(PROFILE).pprof"; fi

# Every fuzz target of every package (go test -list finds them, so new
# targets join by themselves; FUZZ, a regexp, selects some) runs for
# FUZZTIME. The inputs that found new coverage, which go keeps in its
# cache, are then copied into the package's testdata/fuzz/<Target>/ (those
# not there yet), where plain go test runs them as seeds, and the target's
# seeds are run once to check them: commit them. A failing input is
# written there by go itself, and fails the run. A run that ends in error
# without one is go 1.26's fuzzing coordinator racing its own deadline
# (go.dev/issue/75804), reported and passed over. The exhaustive half-
# precision test, too long for make test (which runs TestHalfKernels, its
# sample of every rounding case), runs last when FUZZ matches its name.
SEEDS ?= 10000
# CHAOS_RUNTIME_EVERY: chaos-sim runs the shipped runtimes of every N-th seed's job too (0: none)
CHAOS_RUNTIME_EVERY ?= 1
chaos-sim:
	@mkdir -p build
	@status=0; $(GO) test -count=1 -run '^TestChaosSim$$' -v ./learner/cluster/ -args -chaos.seeds $(SEEDS) -chaos.runtime.every $(CHAOS_RUNTIME_EVERY) > build/chaos-sim.log 2>&1 || status=$$?; \
	grep -v '^=== RUN\|^--- PASS\|^PASS$$\|^ok \|^chaos: ' build/chaos-sim.log || true; \
	grep '^chaos: ' build/chaos-sim.log || { tail -20 build/chaos-sim.log; status=1; }; \
	exit $$status

chaos-defects:
	@mkdir -p build
	@status=0; $(GO) test -count=1 -tags 'simdefects $(TAGS)' -run '^TestChaosSimFindsDefects$$' -v ./learner/cluster/ > build/chaos-defects.log 2>&1 || status=$$?; \
	grep -v '^=== RUN' build/chaos-defects.log; exit $$status

chaos: export SOFTSYNC_REQUIRE_LAUNCHERS = 1
chaos: deps csrc-hash chaos-sim
	$(GO) test -tags 'chaos $(TAGS)' -run '^TestChaos(BigModel)?$$' -v -timeout 150m -ldflags '$(LDFLAGS)' ./tools/softsync/

fuzz: csrc-hash
	@cache=$$($(GO) env GOCACHE)/fuzz; count() { ls "$$1" 2>/dev/null | wc -l || true; }; \
	$(GO) test -list '^Fuzz' -ldflags '$(LDFLAGS)' ./... | \
	awk '/^Fuzz/ { t = t " " $$1 } /^(ok|\?) / { if (t != "") print $$2 t; t = "" }' | \
	while read -r pkg targets; do \
		dir=$$($(GO) list -f '{{.Dir}}' "$$pkg"); \
		for target in $$targets; do \
			[[ $$target =~ $(FUZZ) ]] || continue; \
			corpus="$$dir/testdata/fuzz/$$target"; before=$$(count "$$corpus"); \
			echo "fuzz: $$pkg $$target ($(FUZZTIME))"; \
			if ! $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -timeout 0 -ldflags '$(LDFLAGS)' "$$pkg" </dev/null; then \
				if [ "$$(count "$$corpus")" -gt "$$before" ]; then \
					echo "fuzz: $$target failed; the failing input is in $${corpus#$$PWD/}"; exit 1; \
				fi; \
				echo "fuzz: $$target ended in error without a failing input (go.dev/issue/75804): passed over"; \
			fi; \
			new=0; \
			for f in $$(find "$$cache/$$pkg/$$target" -type f 2>/dev/null); do \
				[ -e "$$corpus/$${f##*/}" ] || { mkdir -p "$$corpus"; cp "$$f" "$$corpus/"; new=$$((new + 1)); }; \
			done; \
			$(GO) test -count=1 -run "^$$target\$$" -ldflags '$(LDFLAGS)' "$$pkg" </dev/null; \
			echo "fuzz: $$new new inputs in $${corpus#$$PWD/}"; \
		done; \
	done
	@if [[ TestHalfKernelsExhaustive =~ $(FUZZ) ]]; then \
		echo "fuzz: ./rdma/ TestHalfKernelsExhaustive (every float32 bit pattern, each assembly level)"; \
		$(GO) test -count=1 -run '^TestHalfKernelsExhaustive$$' -timeout 0 -ldflags '$(LDFLAGS)' ./rdma/ -exhaustive; \
	fi

# Installs what is missing, then makes Open MPI the default mpirun (Debian's
# alternatives already prefer it, priority 50 against MPICH's 40, whatever
# the install order; this undoes a manual choice of MPICH).
deps:
	$(call apt-install,$(DEB_PACKAGES))
	@if [ -e /usr/bin/mpirun.openmpi ] && [ "$$(readlink -f /usr/bin/mpirun)" != "$$(readlink -f /usr/bin/mpirun.openmpi)" ]; then \
		if [ "$$(id -u)" -ne 0 ]; then \
			echo "mpirun is not Open MPI's; as root: update-alternatives --set mpirun /usr/bin/mpirun.openmpi" >&2; exit 1; \
		fi; \
		update-alternatives --set mpirun /usr/bin/mpirun.openmpi; \
	fi

# The references of make bench: iperf3 (TCP over loopback) and PyTorch.
deps-bench:
	$(call apt-install,$(BENCH_PACKAGES))

# What make test checks exported ONNX models with: python3-onnx, PyTorch.
deps-test:
	$(call apt-install,$(TEST_PACKAGES))

# Fashion-MNIST for softsync repro (docs/data.md).
deps-fashion-mnist:
	$(call apt-install,dataset-fashion-mnist)

# apt-install installs the Debian packages of its argument that are missing
# (as root; otherwise it prints the command and fails).
define apt-install
	@missing=$$(for p in $(1); do \
		dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q '^install ok installed$$' || echo "$$p"; \
	done | xargs); \
	if [ -n "$$missing" ]; then \
		cmd="apt-get update && apt-get install -y --no-install-recommends $$missing"; \
		if [ "$$(id -u)" -ne 0 ]; then \
			echo "softsync needs: $$missing. Install them as root:" >&2; \
			echo "  sudo sh -c '$$cmd'" >&2; exit 1; \
		fi; \
		echo "installing: $$missing"; \
		export DEBIAN_FRONTEND=noninteractive; sh -c "$$cmd"; \
	fi
endef

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
# rdma/internal/verbs/csrc.c does the same with csrc/verbs/.
csrc-hash:
	@h=$$(cat $(CSRC) | sha256sum | cut -c1-64); \
	grep -q "$$h" kernels/csrc_hash.go || sed -i "s/^const csrcHash = .*/const csrcHash = \"$$h\"/" kernels/csrc_hash.go
	@h=$$(cat $(CSRC_VERBS) | sha256sum | cut -c1-64); \
	grep -q "$$h" rdma/internal/verbs/csrc_hash.go || sed -i "s/^const csrcHash = .*/const csrcHash = \"$$h\"/" rdma/internal/verbs/csrc_hash.go

clean:
	rm -rf bin build
