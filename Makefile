# hookd — run `make` for the list of targets.
SHELL := /bin/sh
GO ?= go
BIN := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Static, reproducible binaries: the same flags the Dockerfile uses.
LDFLAGS := -s -w -X github.com/hookd/hookd/internal/version.Version=$(VERSION)
export CGO_ENABLED ?= 0

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@echo "hookd make targets:"
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z\/_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/hookd and bin/hookctl (static).
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/hookd ./cmd/hookctl

.PHONY: run
run: build ## Build and run `hookd run`: embedded Kafka, and a local Postgres unless DATABASE_URL is set.
	@if [ -n "$${DATABASE_URL:-}" ]; then \
		exec $(BIN)/hookd run; \
	else \
		scripts/ensure-deps.sh && url=$$(scripts/devdb.sh) && \
		echo "hookd: using the local Postgres $$url (export DATABASE_URL=$$url for hookctl)" >&2 && \
		DATABASE_URL=$$url exec $(BIN)/hookd run; \
	fi

.PHONY: devdb-stop
devdb-stop: ## Stop the local Postgres that `make run` started.
	@d=$$(pwd)/.tmp/pg; [ -f $$d/PG_VERSION ] || exit 0; \
	bin=$$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1); \
	if [ "$$(id -u)" = 0 ]; then runuser -u postgres -- $$bin/pg_ctl -D $$d stop; else $$bin/pg_ctl -D $$d stop; fi

.PHONY: test
test: check ## Install test dependencies (postgresql, kcat, chromium), then go test -race ./... against real Postgres, kfake and Chromium.
	@scripts/ensure-deps.sh
	@CGO_ENABLED=1 scripts/test.sh

.PHONY: check
check: ## go.mod tidy, and the command-line binaries build for Linux, macOS and Windows.
	@$(GO) mod tidy -diff >/dev/null || { echo "hookd: go.mod/go.sum are not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }
	@for os in linux darwin windows; do \
		GOOS=$$os $(GO) build -o /dev/null ./cmd/hookd || exit 1; \
		GOOS=$$os $(GO) build -o /dev/null ./cmd/hookctl || exit 1; \
	done

.PHONY: lint
lint: check ## go mod tidy, cross-builds, links in the Markdown files, go vet, gofmt and staticcheck.
	@scripts/check-links.sh
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# Postgres for bench: DATABASE_URL when set, otherwise a throwaway pg_virtualenv cluster with the server's
# defaults (fsync on); hookbench switches fsync itself with ALTER SYSTEM (--postgres durable,fsync-off).
PG_VIRTUALENV := pg_virtualenv -t -o wal_level=logical -o max_replication_slots=64 -o max_wal_senders=64 -o max_connections=400 --

.PHONY: bench
bench: ## End-to-end benchmark (go run ./bench/hookbench, BENCH_ARGS=...): real binaries, durable Postgres (and fsync=off beside it), baselines B0/B1/B2; results in bench-results/.
	@scripts/ensure-deps.sh
	@if [ -n "$${DATABASE_URL:-}" ]; then $(GO) run ./bench/hookbench $(BENCH_ARGS); \
	else $(PG_VIRTUALENV) $(GO) run ./bench/hookbench $(BENCH_ARGS); fi

.PHONY: bench-micro
bench-micro: ## Run the Go (testing.B) benchmarks (needs Postgres like make test).
	@scripts/ensure-deps.sh
	@HOOKD_RACE=off scripts/test.sh -run '^$$' -bench . -benchtime 2s ./...

.PHONY: chaos
chaos: ## Long fault-injection scenarios (kill -9 loops, broker/Postgres restarts, bad receivers, rebalance storm); see docs/reliability.md.
	@scripts/ensure-deps.sh
	@HOOKD_CHAOS=long CGO_ENABLED=1 scripts/test.sh -run 'TestChaos' -timeout 60m -v ./bench/chaos/

.PHONY: clean
clean: ## Remove build output (keeps ./data and the local Postgres).
	rm -rf $(BIN)
