# ncclgo — see README.md. `make` is the main job, `make test` the CI suite.

GO        ?= go
ARCH      ?=
ONLY      ?=
JOBS      ?=
FATBIN    ?= build/ncclgo.fatbin
BUNDLE    ?= bundle
# Where the GPU suite finds nvcc on the device machine.
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)

# go-nvml's cgo preamble calls NVML functions that nvml.h marks deprecated;
# the compiler's warning for each (147 lines) would bury every real message.
CGO_CFLAGS ?= -O2 -g
CGO_CFLAGS += -Wno-deprecated-declarations
export CGO_CFLAGS

BUILD_FLAGS = $(if $(ARCH),--arch $(ARCH)) $(if $(ONLY),--only "$(ONLY)") $(if $(JOBS),-j $(JOBS)) --out $(FATBIN)

.PHONY: hooks all generate kernels test devsyntax vet lint gofmt staticcheck enumswitch unit check-generated fuzz bench bundle gpu-test gpu-verify embed libnccl clean

## all: generate the kernel space and, where nvcc exists, build the fatbin.
all: generate kernels

## generate: regenerate generated/ (what `go generate ./...` does).
generate:
	$(GO) generate ./...

## kernels: compile generated/ into $(FATBIN) with nvcc (skips with a message without nvcc).
kernels:
	@if [ -z "$(NVCC)" ] && [ -z "$$CUDA_HOME" ]; then \
		echo "ncclgo: nvcc not found: generated/ is up to date, but no fatbin was built."; \
		echo "        Install the CUDA toolkit, or set CUDA_HOME or NVCC, then run 'make kernels'."; \
	else \
		$(GO) run ./cmd/ncclgen build $(BUILD_FLAGS) $(if $(NVCC),--nvcc $(NVCC)); \
	fi

## hooks: use the repository's git hooks (.githooks: commit subjects of at
## most 72 characters, `area: what changed`).
hooks:
	git config core.hooksPath .githooks

## test: what CI runs: vet, the linters, every test, and a check that
## generated/ matches its generator.
test: vet lint unit check-generated devsyntax

## devsyntax: the device library's C++ through g++ (tests/gxxcheck.sh), for
## sm_90 and for the NG_TRACE build's marks, where a C++ compiler exists;
## and runtime/cuda's shim with its NCU_OPSTATS timers compiled in.
devsyntax:
	@if command -v $${CXX:-g++} >/dev/null 2>&1; then \
		bash tests/gxxcheck.sh 900 && \
		bash tests/gxxcheck.sh --only all_reduce_sum_f32 --define NG_TRACE=1 900; \
	else echo "devsyntax: skipped, no C++ compiler ($${CXX:-g++})"; fi
	CGO_CFLAGS="$${CGO_CFLAGS:--O2} -DNCU_OPSTATS=1" $(GO) build -o /dev/null ./runtime/cuda

# HOSTCOMM_TAG builds the one hook that lets capi's host-cost benchmark wrap
# a device-less engine (hostcomm.go); libraries and programs never carry it.
HOSTCOMM_TAG = -tags ncclgo_hostcomm

vet:
	$(GO) vet ./...
	$(GO) vet $(HOSTCOMM_TAG) . ./capi

## lint: staticcheck (pinned in go.mod's tool directive) and enumswitch (a
## switch over a vocabulary enum names every value or has a default).
lint: gofmt staticcheck enumswitch

## gofmt: fails naming the hand-written Go files gofmt would change.
gofmt:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go') | grep -v '^generated/'); \
	if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi

staticcheck:
	$(GO) tool staticcheck ./...

enumswitch:
	$(GO) run ./internal/tools/enumswitch ./...

## unit: the tests, then every benchmark once (-benchtime 1x: a benchmark
## that no longer runs fails here, not at the next measurement; ~30 s).
unit:
	$(GO) test -count=1 ./...
	$(GO) test -count=1 $(HOSTCOMM_TAG) -run TestHostCost ./capi
	@echo "$(GO) test -count=1 -run XXX -bench . -benchtime 1x ./..."; \
	out=$$($(GO) test -count=1 -run XXX -bench . -benchtime 1x ./... 2>&1) || { echo "$$out" | grep -v '^Benchmark'; exit 1; }

# GENERATED are the trees `go generate ./...` writes.
GENERATED = generated tests/devharness/gen

check-generated:
	$(GO) generate ./...
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated files differ from 'go generate ./...' output in:"; \
		git status --porcelain -- $(GENERATED); \
		git diff --stat -- $(GENERATED); \
		echo "Regenerate with 'go generate ./...' and commit (never edit generated/ by hand)."; \
		exit 1; \
	fi
	@echo "generated trees are up to date: $(GENERATED)"

fuzz:
	$(GO) test -run XXX -fuzz FuzzParseFilter -fuzztime 30s ./kspace/
	$(GO) test -run XXX -fuzz FuzzSocketRecv -fuzztime 30s ./runtime/net/

bench:
	$(GO) test -run XXX -bench . ./gen/

## bundle: what the GPU machine (no Go there) needs: test binaries and tools,
## built here; sources (generated/, devicesrc/) travel with the tree.
# GPU_PKGS are the packages whose tests touch the GPU.
GPU_PKGS ?= . ./capi ./runtime/cuda ./runtime/kernels ./runtime/transport ./tests
STRIP    = -ldflags=-s\ -w

bundle:
	rm -rf $(BUNDLE) && mkdir -p $(BUNDLE)/bin $(BUNDLE)/tests
	CGO_ENABLED=1 $(GO) build $(STRIP) -o $(BUNDLE)/bin/ncclgen ./cmd/ncclgen
	CGO_ENABLED=1 $(GO) build $(STRIP) -o $(BUNDLE)/bin/ncclperf ./cmd/ncclperf
	@# examples/slim is a module of its own; without nvcc here its kernel set is
	@# an empty placeholder and the binary takes one at run time (-fatbin FILE).
	test -f examples/slim/kernels.fatbin || : > examples/slim/kernels.fatbin
	cd examples/slim && CGO_ENABLED=1 $(GO) build $(STRIP) -o $(abspath $(BUNDLE))/bin/slim .
	$(MAKE) --no-print-directory libnccl LIBNCCL_DIR=$(BUNDLE) FATBIN=/nonexistent
	$(CC) -std=c99 -O2 -I$(BUNDLE)/include -o $(BUNDLE)/bin/capi_test capi/test/capi_test.c \
		-L$(BUNDLE)/lib -lnccl -ldl -pthread -Wl,-rpath,'$$ORIGIN/../lib'
	@for p in $(GPU_PKGS); do \
		name=$$(echo $$p | sed 's|^\.$$|ncclgo|; s|^\./||; s|/|_|g'); \
		CGO_ENABLED=1 $(GO) test -c $(STRIP) -o $(BUNDLE)/tests/$$name.test $$p || exit 1; \
	done
	@# The host path on a fake GPU (run from the tree: it builds the fake driver).
	CGO_ENABLED=1 $(GO) test -c $(STRIP) -o $(BUNDLE)/tests/hostpath.test ./internal/hostpath
	@du -sh $(BUNDLE); ls -la $(BUNDLE)/bin $(BUNDLE)/tests

## gpu-test: on the GPU machine, from the bundle: build the fatbin, then run every GPU test.
gpu-test:
	$(BUNDLE)/bin/ncclgen build --arch $(or $(ARCH),sm_90) $(if $(ONLY),--only "$(ONLY)") $(if $(JOBS),-j $(JOBS)) --out $(FATBIN) $(if $(NVCC),--nvcc $(NVCC))
	@fail=0; for t in $(BUNDLE)/tests/*.test; do \
		echo "== $$t"; \
		dir=$$(basename $$t .test | sed 's|^ncclgo$$|.|; s|_|/|g'); \
		( cd $$dir 2>/dev/null || true; NCCLGO_FATBIN=$(CURDIR)/$(FATBIN) NCCL_NVLS_ENABLE=0 $(CURDIR)/$$t -test.v -test.count=1 $(TESTFLAGS) ) || fail=1; \
	done; exit $$fail

## libnccl: ncclgo as a drop-in libnccl.so.2 (NCCL's C API, package capi), laid out
## as NCCL_HOME: build/include/nccl.h, build/lib/libnccl.so.2 (+ libnccl.so link).
## The kernels: $$NCCLGO_FATBIN, or embedded (EMBED=1 after `make embed`), or
## build/lib/ncclgo.fatbin beside the library (copied from $(FATBIN) when it exists).
LIBNCCL_DIR   ?= build
## Its exports are NCCL's API alone (capi/libnccl.map, a linker version script).
LIBNCCL_TAGS   = $(if $(EMBED),ncclgo_embed)
LIBNCCL_FLAGS  = $(if $(LIBNCCL_TAGS),-tags $(LIBNCCL_TAGS)) -buildmode=c-shared \
	-ldflags="-s -w -extldflags '-Wl,-soname,libnccl.so.2 -Wl,-z,nodelete -Wl,--version-script=$(abspath capi/libnccl.map)'"

libnccl:
	mkdir -p $(LIBNCCL_DIR)/lib $(LIBNCCL_DIR)/include
	CGO_ENABLED=1 $(GO) build $(LIBNCCL_FLAGS) -o $(LIBNCCL_DIR)/lib/libnccl.so.2 ./capi
	rm -f $(LIBNCCL_DIR)/lib/libnccl.so.h
	ln -sf libnccl.so.2 $(LIBNCCL_DIR)/lib/libnccl.so
	ln -sf lib/libnccl.so.2 $(LIBNCCL_DIR)/libnccl.so.2
	cp generated/include/nccl.h $(LIBNCCL_DIR)/include/nccl.h
	@if [ -f $(FATBIN) ]; then cp $(FATBIN) $(LIBNCCL_DIR)/lib/ncclgo.fatbin; \
	else echo "note: no $(FATBIN): put ncclgo.fatbin beside libnccl.so.2, or set NCCLGO_FATBIN"; fi
	@ls -la $(LIBNCCL_DIR)/lib $(LIBNCCL_DIR)/include

## embed: copy $(FATBIN) into runtime/kernels so that `go build -tags ncclgo_embed`
## puts the kernels inside the binary (then no NCCLGO_FATBIN is needed at run time).
embed: kernels
	@test -f $(FATBIN) || { echo "no $(FATBIN): build the kernels first (needs nvcc)"; exit 1; }
	cp $(FATBIN) runtime/kernels/ncclgo.fatbin
	@echo "now: go build -tags ncclgo_embed ./your/program"

## gpu-verify: the whole GPU-machine check from the bundle (build timings, tests, benchmarks).
gpu-verify:
	bash tests/gpu-verify.sh

clean:
	rm -rf build $(BUNDLE)
