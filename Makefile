# Onceplan — `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
GOTEST_FLAGS ?= -count=1 -timeout 25m

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-12s %s\n", $$1, $$2}'

.PHONY: run
run: postgres build ## start `onceplan serve` on the embedded default (data in ./.onceplan)
	./bin/onceplan serve

.PHONY: build
build: ## build ./bin/onceplan
	$(GO) build -o bin/onceplan ./cmd/onceplan

.PHONY: postgres
postgres: ## make sure PostgreSQL server binaries are installed (installs Debian's package when root)
	@bash scripts/ensure-postgres.sh

.PHONY: test
test: postgres lint ## the whole test suite, on a throw-away PostgreSQL cluster it starts and stops
	$(GO) run ./internal/tools/withpg -- $(GO) test $(GOTEST_FLAGS) ./...

.PHONY: test-race
test-race: postgres ## the test suite under the race detector (slower)
	$(GO) run ./internal/tools/withpg -- $(GO) test -race $(GOTEST_FLAGS) ./...

.PHONY: lint
lint: ## gofmt and go vet must be clean
	@out=$$(gofmt -l .); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: clean
clean: ## remove build output (never the data dir)
	rm -rf bin

BENCH_TARGETS ?= 1000000
.PHONY: bench
bench: postgres ## benchmarks against same-run baselines (BENCH_TARGETS=1000000); see docs/BENCHMARKS.md
	$(GO) run ./internal/tools/withpg -- $(GO) run ./internal/tools/bench -targets $(BENCH_TARGETS)
