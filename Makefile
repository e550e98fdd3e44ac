# Onceplan — `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
GOTEST_FLAGS ?= -count=1 -timeout 25m

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-12s %s\n", $$1, $$2}'

DATA_DIR ?= ./.onceplan
.PHONY: run
# The demo's slow outbox, unless ONCEPLAN_PROVIDERS names the providers
# (in the environment or as `make run ONCEPLAN_PROVIDERS=…`): a --provider
# flag would win over it.
RUN_PROVIDER = $(if $(strip $(ONCEPLAN_PROVIDERS)),,--provider "outbox=maildir://$(abspath $(DATA_DIR))/outbox?rate=5/s")

run: postgres build ## start `onceplan serve` on the embedded default (data in ./.onceplan) with a demo campaign to approve (ONCEPLAN_PROVIDERS=… names other providers)
	./bin/onceplan serve --data-dir $(DATA_DIR) --demo $(RUN_PROVIDER)

.PHONY: build
build: ## build ./bin/onceplan
	$(GO) build -o bin/onceplan ./cmd/onceplan

.PHONY: python
python: ## make sure python3 (3.10+) is installed for the Python client's suite (installs Debian's package when root)
	@bash scripts/ensure-python.sh >/dev/null

.PHONY: postgres
postgres: ## make sure PostgreSQL server binaries are installed (installs Debian's package when root)
	@bash scripts/ensure-postgres.sh

.PHONY: node
node: ## make sure Node.js >= 20 and npm are installed, for the TypeScript client's suites (installs when root)
	@bash scripts/ensure-node.sh

# testrun prints an estimate first (the last passing run's time, kept in
# bin/) and each package's time at the end; see docs/TESTING.md.
TESTRUN = $(GO) run ./internal/tools/withpg -- $(GO) run ./internal/tools/testrun

.PHONY: test
test: postgres python node lint ## the whole test suite, on a throw-away PostgreSQL cluster it starts and stops (about 10 min; docs/TESTING.md)
	$(TESTRUN) -suite test -- $(GOTEST_FLAGS) ./...

FAULTS_FLAGS ?= -count=1 -timeout 20m -v
.PHONY: test-faults
test-faults: postgres python node ## the fault suite, slow tests included: PostgreSQL restarted, stopped and crashed, provider faults, the Python and TypeScript agents' kill matrices three times (see docs/RELIABILITY.md)
	ONCEPLAN_FAULTS=1 $(TESTRUN) -suite test-faults -- $(FAULTS_FLAGS) ./internal/faulttest/ ./clients/pythontest/ ./clients/typescript/

FUZZTIME ?= 30s
.PHONY: fuzz
fuzz: postgres ## every Fuzz* target of the repo (go test -list) for FUZZTIME (30s) each, on a throw-away PostgreSQL cluster; not part of make test
	FUZZTIME=$(FUZZTIME) GO=$(GO) $(GO) run ./internal/tools/withpg -- bash scripts/fuzz.sh

.PHONY: test-race
test-race: postgres ## the test suite under the race detector (slower)
	$(GO) run ./internal/tools/withpg -- $(GO) test -race $(GOTEST_FLAGS) ./...

.PHONY: lint
lint: templ-check openapi-lint ## gofmt, go vet and staticcheck must be clean, generated templ code current, the OpenAPI document lint-free
	@out=$$(gofmt -l .); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# The OpenAPI linter is Redocly CLI, pinned by web/api/lint/package-lock.json
# and installed there (npm ci) on first use and whenever the lock changes.
OPENAPI_LINT := web/api/lint
$(OPENAPI_LINT)/node_modules/.package-lock.json: $(OPENAPI_LINT)/package-lock.json | node
	cd $(OPENAPI_LINT) && npm ci --no-audit --no-fund
	@touch $@

.PHONY: openapi-lint
openapi-lint: node $(OPENAPI_LINT)/node_modules/.package-lock.json ## web/api/openapi.yaml against Redocly CLI's recommended rules, warnings as errors (web/api/lint/redocly.yaml)
	REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(OPENAPI_LINT)/node_modules/.bin/redocly lint --config $(OPENAPI_LINT)/redocly.yaml

.PHONY: generate
generate: ## regenerate the templ views (web/view/*_templ.go) with the templ pinned in go.mod
	$(GO) tool templ generate

.PHONY: schema
schema: postgres ## write migrations/schema.sql: pg_dump of the schema after every migration (make test fails while it is stale)
	ONCEPLAN_WRITE_SCHEMA=1 $(GO) run ./internal/tools/withpg -- $(GO) test -count=1 -run '^TestSchemaSQLIsCurrent$$' ./migrations/

.PHONY: templ-check
templ-check: ## fail when `go tool templ generate` would change the checked-in views
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; mkdir -p "$$tmp/web"; cp -r web/view "$$tmp/web/view"; \
	  $(GO) tool templ generate -path "$$tmp" >/dev/null 2>&1 || { echo "templ generate failed"; exit 1; }; \
	  if ! diff -r web/view "$$tmp/web/view" >/dev/null; then \
	    echo "web/view: generated templ code is not current: run make generate"; diff -r web/view "$$tmp/web/view" | head -40; exit 1; fi

.PHONY: screenshots
screenshots: postgres ## rerun the browser end-to-end test and save its screenshots to docs/screenshots/
	@bash scripts/ensure-chromium.sh >/dev/null
	ONCEPLAN_SCREENSHOTS=$(CURDIR)/docs/screenshots $(GO) run ./internal/tools/withpg -- $(GO) test -count=1 -run TestBrowser ./cmd/onceplan

.PHONY: clean
clean: ## remove build output (never the data dir)
	rm -rf bin

BENCH_TARGETS ?= 1000000
BENCH_FLAGS ?=
.PHONY: bench
bench: postgres ## every benchmark against same-run baselines (40-50 min), summary written into docs/BENCHMARKS.md; BENCH_FLAGS=-h lists sizes and scenarios
	$(GO) run ./internal/tools/withpg -- $(GO) run ./internal/tools/bench -targets $(BENCH_TARGETS) -doc docs/BENCHMARKS.md $(BENCH_FLAGS)

.PHONY: bench-history
bench-history: postgres ## a new campaign and its audit beside 10,000,000 ledger rows of 100 finished campaigns, against an empty ledger in the same run (about an hour; its row written into docs/BENCHMARKS.md); BENCH_FLAGS=-history-effects=… to size it
	$(GO) run ./internal/tools/withpg -- $(GO) run ./internal/tools/bench -scenarios history -doc docs/BENCHMARKS.md $(BENCH_FLAGS)

.PHONY: bench-quick
bench-quick: postgres ## every benchmark at tiny sizes: checks the harness runs (CI); writes nothing
	$(GO) run ./internal/tools/withpg -- $(GO) run ./internal/tools/bench -quick
