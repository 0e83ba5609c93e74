# Pulse: every tool is pinned in go.mod and run with `go tool`; nothing is
# installed globally. `make help` lists the targets.

GO      ?= go
BUF     := $(GO) tool buf
ARGS    ?=
BIN     := bin

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

LDFLAGS := -ldflags "-X github.com/pulsehealth/pulse/internal/version.revision=$$(git rev-parse HEAD 2>/dev/null)"
# The image's binaries leave out the symbol table and DWARF (-s -w): panics
# still print function names and lines, and the layer is about half the size.
IMAGE_LDFLAGS := -ldflags "-s -w -X github.com/pulsehealth/pulse/internal/version.revision=$$(git rev-parse HEAD 2>/dev/null)"

# run and target build the binary and run it through scripts/foreground, so
# that on Ctrl-C make exits with the binary's own status: 0 after a clean
# shutdown, where go run says 1 and make itself would say Interrupt.
.PHONY: run
run: ## start pulsed on 127.0.0.1:50051 (extra flags: make run ARGS="-interval 1s")
	$(GO) build $(LDFLAGS) -o $(BIN)/ ./cmd/pulsed
	@scripts/foreground $(BIN)/pulsed $(ARGS)

.PHONY: etcd
etcd: ## start a local etcd on 127.0.0.1:2379 for pulsed -registry etcd (data in ./etcd-data)
	$(GO) tool go.etcd.io/etcd/server/v3 --name pulse-dev --data-dir etcd-data \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster pulse-dev=http://127.0.0.1:2380 $(ARGS)

.PHONY: target
target: ## start a toy HTTP backend on 127.0.0.1:8080 for the walkthrough
	$(GO) build $(LDFLAGS) -o $(BIN)/ ./cmd/pulse-target
	@scripts/foreground $(BIN)/pulse-target $(ARGS)

.PHONY: build
build: ## build every binary into bin/, with the Git revision for --version
	$(GO) build $(LDFLAGS) -o $(BIN)/ ./cmd/...

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE   ?= $(BIN)/pulse-image.tar

.PHONY: image
image: ## build the container image (static pulsed, pulsectl, pulse-lb; no daemon, no base image) into bin/pulse-image.tar, tagged localhost/pulse:VERSION (git describe) and :latest
	CGO_ENABLED=0 $(GO) build -trimpath $(IMAGE_LDFLAGS) -o $(BIN)/image/ ./cmd/pulsed ./cmd/pulsectl ./cmd/pulse-lb
	$(GO) run ./deploy/image -bin $(BIN)/image -version $(VERSION) -revision "$$(git rev-parse HEAD 2>/dev/null)" \
		-created "$$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)" -out $(IMAGE)

.PHONY: generate
generate: ## regenerate gen/ from proto/
	$(BUF) generate

.PHONY: check-generate
check-generate: ## fail if gen/ is not what proto/ generates
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(BUF) generate -o "$$tmp" && \
	if ! diff -r gen "$$tmp/gen" >/dev/null; then \
		diff -r gen "$$tmp/gen" | head -n 20; \
		echo "gen/ is stale: run 'make generate' and commit it"; exit 1; \
	fi && echo "gen/ matches proto/"

.PHONY: lint
lint: ## buf lint, gofmt and go vet
	$(BUF) lint
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './gen/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: test
test: lint check-generate ## lint, check gen/, then every test with the race detector, then build examples/
	$(GO) test -race -count=1 -timeout 30m ./...
	cd examples && $(GO) vet ./... && $(GO) build ./...
	@command -v chromium >/dev/null 2>&1 || echo "NOTE: chromium is not installed, so the real-browser test of the status page was SKIPPED; run 'make browser-test'"

.PHONY: browser-test
browser-test: ## run the status page's real-browser test (installs Debian's chromium when missing)
	GO=$(GO) scripts/browser-test

.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	GO=$(GO) FUZZTIME=$(or $(FUZZTIME),30s) scripts/fuzz

.PHONY: fuzz-api
fuzz-api: ## fuzz the real pulsed's whole API with restarts for FUZZTIME (default 10m; make test runs 20s); PULSE_API_FUZZ_SEED=N replays
	PULSE_API_FUZZ_TIME=$(or $(FUZZTIME),10m) $(GO) test -race -count=1 -timeout 0 -run '^TestAPIFuzz$$' -v ./cmd/pulsed/

.PHONY: bench
bench: ## run the benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

.PHONY: bench-harness
bench-harness: ## measure pulsed beside HAProxy at 1k-100k targets (installs Debian's haproxy when missing; POINTS=1000@1s,10000@1s)
	GO=$(GO) scripts/bench $(ARGS)

.PHONY: bench-replicas
bench-replicas: ## probes/s and CPU per probe of 1, 2, 3 pulsed replicas on etcd against the embedded registry (REPLICAS=1,2,3 POINTS=2000@1s,5000@1s)
	GO=$(GO) REPLICAS="$${REPLICAS:-1,2,3}" POINTS="$${POINTS:-2000@1s,5000@1s}" scripts/bench $(ARGS)

# The files whose behaviour the tests must pin: the state machine, pool
# policies, the watch stream, the store, the one-shot checker, and auth.
MUTATE_CHECKER_SKIP := -E 'probe/' -E 'etcdreg/' -E 'fakeclock/' -E '(^|/)checker\.go$$' \
	-E '(^|/)(overload|passive|scheduler|shared|registry_shared|spec|store|types|clock|liveness|testhook_on|testhook_off)\.go$$'
MUTATE_SERVER_SKIP  := -E 'web/' -E 'dns/' -E 'xds/' -E '(^|/)(connlimit|convert|fanout|health|limits|server|tls|validate)\.go$$'
MUTATE_FLAGS        ?= --workers 2 --timeout-coefficient 15

.PHONY: mutate
mutate: ## mutation testing (gremlins) of the core's contract files; slow (tens of minutes), not in CI
	$(GO) tool gremlins unleash $(MUTATE_FLAGS) $(MUTATE_CHECKER_SKIP) ./checker
	$(GO) tool gremlins unleash $(MUTATE_FLAGS) $(MUTATE_SERVER_SKIP) ./server
