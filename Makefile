# kfsdb development tasks. Run `make help` for the list.
#
# Modules (MODULES): the library (.), the migration helper (migrate/), the
# test kit for application teams (kfsdbtest/, with the README's quick
# start), the test harness, integration tests (the adapters' and the deploy
# binary's that need a database, a broker or a browser among them), demo and
# bench-kfsdb programs (tests/; never released, and no released module
# requires it), the deploy command (cmd/kfsdb/), the bench and demo binary
# kfsdb-bench (bench/kfsdb-bench/: work, relay, bench, the load driver), and
# the adapters above the runtime, each its own module (adapters/: the
# Prometheus one adapters/prom/, the OpenTelemetry one adapters/otel/, the
# NATS JetStream broker adapters/natsjs/), and the pinned development tools
# with releasecheck (tools/, never tagged). Every target runs each
# module with GOWORK=off, so it checks that module's own go.mod exactly as
# CI and importers see it; go.work is only a convenience for editors and
# ad-hoc runs.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

MODULES := . migrate kfsdbtest tests cmd/kfsdb bench/kfsdb-bench adapters/prom adapters/otel adapters/natsjs tools
# Code generators pinned in tools/go.mod (a separate module, not in go.work).
SQLC := GOWORK=off go tool -modfile=tools/go.mod sqlc

# PostgreSQL major version for postgres-image.
PG_MAJOR ?= 17
# Image the tests and the demo run when KFS_TEST_DATABASE_URL is unset.
KFS_TEST_POSTGRES_IMAGE ?= kfsdb-postgres:17
export KFS_TEST_POSTGRES_IMAGE
# The Ryuk reaper image cannot be pulled here; pgtest removes its containers.
TESTCONTAINERS_RYUK_DISABLED ?= true
export TESTCONTAINERS_RYUK_DISABLED

# -timeout: a package's whole run, not a hang detector (the tests bound their
# own waits); the default 10 minutes killed tests/runtime on PostgreSQL 15
# at 605 s on a machine loaded with two other test runs and CPU hogs.
GO_TEST_FLAGS ?= -race -count=1 -timeout 30m

.PHONY: help
help: ## Show this list.
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 24

.PHONY: generate
generate: ## Regenerate db/gen from db/queries and db/migrations with the pinned sqlc.
	$(SQLC) generate

.PHONY: check-generate
check-generate: ## Fail if db/gen differs from what sqlc generates (hand edits, stale or untracked files).
	@echo "== sqlc diff (generated code vs files on disk)"
	$(SQLC) diff
	@echo "== sqlc generate, then compare db/gen with git"
	$(SQLC) generate
	git diff --exit-code -- db/gen
	@untracked=$$(git ls-files --others --exclude-standard -- db/gen); \
	if [ -n "$$untracked" ]; then echo "untracked files in db/gen (commit or delete them):"; echo "$$untracked"; exit 1; fi
	@echo "check-generate: db/gen is up to date"

.PHONY: postgres-image
postgres-image: ## Build the local image kfsdb-postgres:$(PG_MAJOR) from Debian packages (PG_MAJOR=17|15; needs root).
	scripts/postgres-image/build.sh $(PG_MAJOR)

.PHONY: pgaf-image
pgaf-image: ## Build kfsdb-pgaf:$(PG_MAJOR): kfsdb-postgres plus pg_auto_failover, for the HA cluster of tests/hacluster (PG_MAJOR=17|15; needs root).
	scripts/postgres-image/build.sh pgaf $(PG_MAJOR)

# Builds the image named by $(1) if it is a missing kfsdb-postgres:N image,
# unless KFS_TEST_DATABASE_URL points the tests at an existing server.
define ensure-image
	@if [ -n "$${KFS_TEST_DATABASE_URL:-}" ]; then \
		echo "tests use the server in KFS_TEST_DATABASE_URL"; \
	else case "$(1)" in \
		kfsdb-postgres:*) docker image inspect "$(1)" >/dev/null 2>&1 || \
			$(MAKE) --no-print-directory postgres-image PG_MAJOR="$$(echo '$(1)' | sed 's/^kfsdb-postgres://')";; \
		*) echo "tests use image $(1)";; \
	esac; fi
endef

# Host programs whole test packages need: Chromium (tests/console), PgBouncer
# (tests/pgbouncer), psql (tests/migrations compares the seed run through
# psql). KFS_ALLOW_MISSING=browser,pgbouncer,seed,container lets `make test`
# go on without them: those tests then skip, and the summary names each.
KFS_ALLOW_MISSING ?=
export KFS_ALLOW_MISSING

.PHONY: test-deps
test-deps: ## Install what whole test packages need (chromium, pgbouncer, psql) from Debian when root; otherwise stop and say how.
	@missing=(); \
	command -v chromium >/dev/null 2>&1 || [ -n "$${KFS_CHROMIUM:-}" ] || case ",$(KFS_ALLOW_MISSING)," in *,browser,*) ;; *) missing+=(chromium);; esac; \
	{ command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; } || case ",$(KFS_ALLOW_MISSING)," in *,pgbouncer,*) ;; *) missing+=(pgbouncer);; esac; \
	command -v psql >/dev/null 2>&1 || missing+=(postgresql-client); \
	if [ "$${#missing[@]}" -eq 0 ]; then echo "test-deps: chromium, pgbouncer and psql present"; exit 0; fi; \
	if [ "$$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "test-deps: installing from Debian: $${missing[*]}"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$${missing[@]}"; \
	else \
		echo "test-deps: missing $${missing[*]}: the browser, PgBouncer or migration tests cannot run." >&2; \
		echo "  install them (Debian/Ubuntu: sudo apt-get install -y --no-install-recommends $${missing[*]})," >&2; \
		echo "  or run with KFS_ALLOW_MISSING=browser,pgbouncer to skip those tests (the summary names them)." >&2; \
		exit 1; \
	fi

.PHONY: test
test: test-deps ## Run every test of every module (-race), building kfsdb-postgres:17 if needed; the summary names every skipped test and why.
	$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE))
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; failed=; \
	(cd tests && GOWORK=off go build -o "$$tmp/testsummary" ./cmd/testsummary); \
	for m in $(MODULES); do \
		echo "== go test $(GO_TEST_FLAGS) ./... in module $$m"; \
		(cd $$m && GOWORK=off go test -json $(GO_TEST_FLAGS) ./... 2>&1) | "$$tmp/testsummary" -echo -log "$$tmp/run.jsonl" || failed="$$failed $$m"; \
	done; \
	"$$tmp/testsummary" -summary "$$tmp/run.jsonl" || failed="$${failed:- (a test)}"; \
	if [ -n "$$failed" ]; then echo "make test: FAILED in module(s):$$failed"; exit 1; fi

# Packages whose tests run goroutines, clocks, sleeps, subprocesses or
# brokers, as module:package-pattern.
FLAKE_PACKAGES ?= tests:./runtime/ tests:./multiproc/ tests:./partition/ tests:./faults/ tests:./repo/ tests:./migrations/ \
	tests:./pgbouncer/ tests:./console/ tests:./consolehttp/ tests:./cli/ tests:./adapters/... tests:./model/ tests:./cmd/... \
	.:./internal/... .:./worker/... .:./relay/... .:./pgsource/... cmd/kfsdb:./... bench/kfsdb-bench:./... kfsdbtest:./...
FLAKE_COUNT ?= 5
# CPU hogs beside the tests (stress-ng --cpu N, or shell busy loops).
FLAKE_LOAD ?= 2

.PHONY: flake-hunt
flake-hunt: test-deps ## Run the timing-sensitive packages FLAKE_COUNT times (-race) with FLAKE_LOAD CPU hogs beside them, then once more with GOMAXPROCS=1; writes bench/out/flake-hunt.txt.
	$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE))
	mkdir -p $(BENCH_OUT)/flake-hunt
	@hogs=(); trap 'kill "$${hogs[@]}" 2>/dev/null || true' EXIT; \
	if command -v stress-ng >/dev/null 2>&1; then stress-ng --cpu $(FLAKE_LOAD) --quiet & hogs+=($$!); \
	else for i in $$(seq $(FLAKE_LOAD)); do (while :; do :; done) & hogs+=($$!); done; fi; \
	echo "flake-hunt: $(FLAKE_LOAD) CPU hogs running (pids $${hogs[*]})"; \
	for run in "$(FLAKE_COUNT) GOMAXPROCS=$$(nproc)" "1 GOMAXPROCS=1"; do \
		count=$${run%% *}; procs=$${run#* }; \
		for mp in $(FLAKE_PACKAGES); do \
			m=$${mp%%:*}; p=$${mp#*:}; \
			echo "== [-count=$$count $$procs] go test -race $$p in module $$m"; \
			log=$(CURDIR)/$(BENCH_OUT)/flake-hunt/$$(echo "$$m$$p-$$count-$$procs" | tr -c 'A-Za-z0-9=-' _).log; \
			(cd $$m && env "$$procs" GOWORK=off go test -race -count=$$count -timeout 60m $$p >"$$log" 2>&1) || true; \
			grep -E '^(ok|FAIL|--- FAIL|panic)' "$$log" || true; \
			grep -q -- '--- FAIL' "$$log" && { grep -A12 -- '--- FAIL' "$$log" | grep -vE '^\s*$$' | head -40; echo "   (whole output: $$log)"; } || true; \
		done; \
	done 2>&1 | tee $(CURDIR)/$(BENCH_OUT)/flake-hunt.txt; \
	if grep -qE '^(FAIL|--- FAIL|panic)' $(CURDIR)/$(BENCH_OUT)/flake-hunt.txt; then echo "flake-hunt: FAILURES above (bench/out/flake-hunt.txt)"; exit 1; fi; \
	echo "flake-hunt: no failure"

.PHONY: test-migrations-pg15
test-migrations-pg15: ## Run the migration tests on PostgreSQL 15 (kfsdb-postgres:15, never KFS_TEST_DATABASE_URL).
	$(call ensure-image,kfsdb-postgres:15)
	cd tests && env -u KFS_TEST_DATABASE_URL KFS_TEST_POSTGRES_IMAGE=kfsdb-postgres:15 \
		GOWORK=off go test $(GO_TEST_FLAGS) -v ./migrations/... 2>&1 | \
		grep -vE '^([0-9]{4}[-/][0-9]{2}[-/][0-9]{2} |=== (PAUSE|CONT))'

.PHONY: migration-locks
migration-locks: ## Migration 0006 on 10^6 knowledge_spaces under application reads and writes: its locks, their spans, the application's waits, a lock_timeout failure (fsync-on server); writes bench/out/migration-locks.txt.
	$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE))
	mkdir -p $(BENCH_OUT)
	cd tests && KFS_MIGRATION_LOCKS=1 GOWORK=off go test -count=1 -run '^TestMigrationLocks$$' -v -timeout 30m ./migrations/ 2>&1 \
		| grep -vE '^(=== |[0-9]{4}/[0-9]{2}/[0-9]{2} |  [A-Z][A-Za-z ]+: |Testcontainers|github.com/testcontainers)' \
		| tee $(CURDIR)/$(BENCH_OUT)/migration-locks.txt

# Extra kfsdb-demo flags, e.g. DEMO_ARGS='--delivery relay' for the relay
# path with its broker faults (dead letters, an outage).
DEMO_ARGS ?=

.PHONY: demo
demo: ## The main job: throwaway PostgreSQL (or DATABASE_URL), migrations, a mixed workload of workers leasing from the outbox, outcome table (tests/cmd/kfsdb-demo; DEMO_ARGS='--delivery relay' for the relay).
	$(if $(DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	cd tests && GOWORK=off go run ./cmd/kfsdb-demo $(DEMO_ARGS)

.PHONY: vet
vet: ## go vet every module, and check gofmt.
	@for m in $(MODULES); do echo "== go vet ./... in module $$m"; (cd $$m && GOWORK=off go vet ./...); done
	@unformatted=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@echo "vet: OK"

.PHONY: lint
lint: ## staticcheck (pinned in tools/go.mod) every module.
	@for m in $(MODULES); do echo "== staticcheck ./... in module $$m"; \
		(cd $$m && GOWORK=off go tool -modfile=$(CURDIR)/tools/go.mod staticcheck ./...); done
	@echo "lint: OK"

.PHONY: check-deps
check-deps: ## Check that importers of the root module never get sqlc, goose, testcontainers, docker, client_golang, the OpenTelemetry SDK, nats or an adapters/ module; that an application importing repo, worker, pgsource, db/migrations and the migrate module compiles in no test, broker, metrics or tracing package (module counts printed); that the kfsdb binary links no testcontainers, moby, NATS or load driver; that testcontainers reaches an application only through the test kit, in its tests; and that no released module requires the tests module or another that is never tagged.
	scripts/check-deps.sh

.PHONY: check-tree
check-tree: ## Fail on a tracked file over 1 MiB (docs images excepted), a tracked path the Go module zip format refuses, or a modified or unignored file in the work tree.
	scripts/check-tree.sh --clean

.PHONY: go-floor
go-floor: ## Measure each released module's oldest Go: vet and unit tests with the go directive's toolchain pass, the minor release below is refused (toolchains through the module proxy).
	$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE))
	scripts/go-floor.sh

# The version release-check rehearses: the next release's (the sums it
# prints and the go.sum lines of the release commit depend on it).
RELEASE_VERSION ?= v0.1.0
# More flags of tools/releasecheck: -keep (keep the proxy, module cache and
# application), -write (write the release commit's go.mod and go.sum files).
RELEASE_CHECK_FLAGS ?=

.PHONY: release-check
release-check: ## Rehearse releasing the current commit (docs/RELEASING.md): every released module's zip into a file proxy as tagged (no replace), then an empty module outside the repository gets, tidies, builds and installs them; needs the Go module proxy.
	cd tools && GOWORK=off go run ./releasecheck -repo $(CURDIR) -version $(RELEASE_VERSION) $(RELEASE_CHECK_FLAGS)

.PHONY: tidy
tidy: ## go mod tidy in every module.
	@for m in $(MODULES); do echo "== go mod tidy in module $$m"; (cd $$m && GOWORK=off go mod tidy); done

# Benchmarks (tests/bench). KFS_BENCH_DATABASE_URL picks the server (use an
# fsync-on one for production-like figures); without it pgtest starts one.
BENCH_TIME ?= 2000x
BENCH_COUNT ?= 6
BENCH_OUT ?= bench/out

.PHONY: bench
bench: ## Benchmarks: each transition repo vs raw pgx, relay dispatch, pgbench; FetchLeases' buffers and statements per lease against their budget (fails past it); writes bench/out and prints ratios.
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	mkdir -p $(BENCH_OUT)
	@# BENCH_COUNT separate -count=1 runs, so repo and raw (and every
	@# operation) interleave and drift hits both alike.
	cd tests && GOWORK=off go test -c -o $(CURDIR)/$(BENCH_OUT)/bench.test ./bench/
	cd tests/bench && for i in $$(seq $(BENCH_COUNT)); do \
		$(CURDIR)/$(BENCH_OUT)/bench.test -test.run '^$$' -test.bench 'Transition|Dispatch|Pgbench' -test.benchtime=$(BENCH_TIME) -test.count=1 -test.timeout 60m; \
	done | tee $(CURDIR)/$(BENCH_OUT)/bench.txt
	@# FetchLeases' budget (buffers and statements per lease, counts, not
	@# times): once, and a failure fails make bench.
	cd tests/bench && $(CURDIR)/$(BENCH_OUT)/bench.test -test.run '^$$' -test.bench 'FetchBudget' -test.benchtime 1x -test.count=1 -test.v \
		-test.timeout 30m >$(CURDIR)/$(BENCH_OUT)/fetchbudget.txt 2>&1; st=$$?; grep -E 'FetchLeases at|BUDGET|^(ok|FAIL|---)' $(CURDIR)/$(BENCH_OUT)/fetchbudget.txt; exit $$st
	@echo "== repo/raw summary (medians of $(BENCH_COUNT) runs; benchstat: benchstat -col /impl $(BENCH_OUT)/bench.txt)"
	cd tests && GOWORK=off go run ./bench/benchsummary $(CURDIR)/$(BENCH_OUT)/bench.txt | tee $(CURDIR)/$(BENCH_OUT)/summary.md

.PHONY: bench-outcome-notify
bench-outcome-notify: ## What migration 0012's outcome NOTIFY costs: Heartbeat, Cancel and Complete with its trigger absent, off (as shipped) and on, BENCH_COUNT interleaved runs; writes bench/out/outcome-notify.txt (benchstat -col /notify).
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	mkdir -p $(BENCH_OUT)
	cd tests && GOWORK=off go test -c -o $(CURDIR)/$(BENCH_OUT)/bench.test ./bench/
	cd tests/bench && for i in $$(seq $(BENCH_COUNT)); do \
		$(CURDIR)/$(BENCH_OUT)/bench.test -test.run '^$$' -test.bench 'OutcomeNotify' -test.benchtime=$(BENCH_TIME) -test.count=1 -test.timeout 60m; \
	done | tee $(CURDIR)/$(BENCH_OUT)/outcome-notify.txt

# Flags of `kfsdb-bench bench` for bench-kfsdb, e.g. BENCH_ARGS='--duration 30s --rate 300'.
BENCH_ARGS ?=

.PHONY: bench-lifecycle
bench-lifecycle: ## The lifecycle side by side on one fsync-on server: kfsdb direct, direct with metrics+tracing (--observe), relay (memqueue), relay through NATS JetStream, River; ROUNDS (3) interleaved rounds, unpaced and RATES (150 300), SIDES to choose; CPU, WAL and statements per item; bench/out/lifecycle.txt(.md).
	scripts/bench-lifecycle.sh

.PHONY: bench-kfsdb
bench-kfsdb: ## `kfsdb-bench bench` (lifecycle load driver, report table) on a throwaway server, or on KFS_BENCH_DATABASE_URL's; BENCH_ARGS passes its flags.
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	$(if $(KFS_BENCH_DATABASE_URL),cd bench/kfsdb-bench && DATABASE_URL="$$KFS_BENCH_DATABASE_URL" GOWORK=off go run . bench $(BENCH_ARGS),cd tests && GOWORK=off go run ./cmd/kfsdb-bench $(BENCH_ARGS))

.PHONY: loadgen
loadgen: ## Lifecycle load driver (bench/kfsdb-bench/loadgen) on KFS_BENCH_DATABASE_URL's server; LOADGEN_SECONDS, LOADGEN_PRODUCERS, LOADGEN_WORKERS, LOADGEN_SPACES, LOADGEN_RATE, LOADGEN_PENDING_WAIT, LOADGEN_INDEXES, LOADGEN_STEPS=1, LOADGEN_ASYNC=1, LOADGEN_SINGLE_COMPLETIONS=1.
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	mkdir -p $(BENCH_OUT)
	cd tests && KFS_LOADGEN=1 GOWORK=off go test -count=1 -run '^TestLoadgen$$' -v -timeout 30m ./bench/ \
		| tee $(CURDIR)/$(BENCH_OUT)/loadgen.txt

# Fuzz targets as package:name (repo/fuzz_*_test.go, worker/delivery_test.go),
# run one after another; `go test` alone replays their committed corpus in
# <package>/testdata/fuzz.
FUZZ_TARGETS := repo:FuzzStartParams repo:FuzzAttemptRef repo:FuzzReads repo:FuzzAcquireLeaseParams \
	repo:FuzzLeaseCalls repo:FuzzFailParams repo:FuzzTruncateMessage repo:FuzzClaimOutboxParams \
	repo:FuzzMarkDispatchedParams repo:FuzzReleaseOutboxParams repo:FuzzPurgeParams repo:FuzzDecodePayload \
	worker:FuzzJudgeRecordable
FUZZTIME ?= 10s
# Go also minimizes every new interesting input, for up to 60s by default;
# on kilobyte-sized inputs that stalls a short run, so bound it.
FUZZMINIMIZETIME ?= 100x

.PHONY: fuzz
fuzz: ## Fuzz every input validator, DecodePayload and the worker's handler-result judge for FUZZTIME each (default 10s).
	@for pt in $(FUZZ_TARGETS); do \
		p=$${pt%%:*}; t=$${pt#*:}; \
		echo "== go test -fuzz $$t -fuzztime $(FUZZTIME) ./$$p"; \
		out=$$(GOWORK=off go test ./$$p -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) 2>&1) || \
			{ echo "$$out"; echo "make fuzz: $$t FAILED (the failing input is saved under $$p/testdata/fuzz/$$t)"; exit 1; }; \
		echo "$$out" | grep '^fuzz: elapsed' | tail -n 1; \
	done

.PHONY: fuzz-short
fuzz-short: ## CI-sized fuzzing: every target for 10,000 inputs (a count, not a time).
	@# A time budget can end while a worker minimizes a new input, which Go
	@# reports as a failure ("context deadline exceeded"); a count cannot.
	@$(MAKE) --no-print-directory fuzz FUZZTIME=10000x

.PHONY: bench-scale
bench-scale: ## Hot statements' p50/p99 at 0, 10^4, 10^5, 10^6 historical attempts (KFS_SCALE_LEVELS); writes bench/out/scale.txt.
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	mkdir -p $(BENCH_OUT)
	cd tests && GOWORK=off go test -run '^$$' -bench 'BenchmarkScale' -benchtime 200x -timeout 60m ./bench/ | tee $(CURDIR)/$(BENCH_OUT)/scale.txt

.PHONY: bench-fetch-lists
bench-fetch-lists: ## Issue 41 item 1: FetchLeases' buffers and statements per lease with tenant lists (include, exclude) beside the same scenarios without, under pgx's plan choice and generic plans (a source's kept connections); goal 1.1x; writes bench/out/fetch-lists.txt.
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	mkdir -p $(BENCH_OUT)
	cd tests && GOWORK=off go test -c -o $(CURDIR)/$(BENCH_OUT)/bench.test ./bench/
	cd tests/bench && { $(CURDIR)/$(BENCH_OUT)/bench.test -test.run '^$$' -test.bench 'FetchLists' -test.benchtime 1x -test.v -test.timeout 60m; \
		PGOPTIONS='-c plan_cache_mode=force_generic_plan' $(CURDIR)/$(BENCH_OUT)/bench.test -test.run '^$$' -test.bench 'FetchLists' -test.benchtime 1x -test.v -test.timeout 60m; } \
		| grep -E '^fetch-lists|^(ok|FAIL|---)' | tee $(CURDIR)/$(BENCH_OUT)/fetch-lists.txt

# History levels of bench-ageing (cumulative terminal attempts).
AGEING_LEVELS ?= 0,10000,100000,1000000,10000000

.PHONY: bench-ageing
bench-ageing: ## Issue 40 item 1: Start, FetchLeases, drain, CompleteMany and the console's and CLI's reads, p50/p99 at AGEING_LEVELS historical attempts (to 10^7, 10^4 tenants, a year of ages) against level 0, on an fsync-on server; goal 1.1x; writes bench/out/ageing*.{txt,csv,svg}.
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	mkdir -p $(BENCH_OUT)
	cd tests && KFS_AGEING=1 AGEING_LEVELS=$(AGEING_LEVELS) KFS_AGEING_OUT=$(CURDIR)/$(BENCH_OUT) GOWORK=off \
		go test -count=1 -run '^TestAgeing$$' -v -timeout 600m ./bench/ 2>&1 \
		| grep --line-buffered -vE '^(=== |[0-9]{4}/[0-9]{2}/[0-9]{2} |  [A-Z][A-Za-z ]+: |Testcontainers|github.com/testcontainers)' \
		| tee $(CURDIR)/$(BENCH_OUT)/ageing.txt; test $${PIPESTATUS[0]} -eq 0
	cd tests && for p in worker operator; do GOWORK=off go run ./bench/plot -in $(CURDIR)/$(BENCH_OUT)/ageing-$$p.csv -out $(CURDIR)/$(BENCH_OUT)/ageing-$$p.svg \
		-title "Ageing: p50 against history, over its figure on empty tables ($$p)" -ylabel "p50 / p50 at no history (drain: rate ratio)" \
		-xlabel "terminal attempts of history (log scale)" -subtitle "TestAgeing, 10^4 tenants, a year of ages; see ageing.txt for the server"; done

.PHONY: bench-start
bench-start: ## Start vs its floor (issue 15): pgbench floor scripts, Start's statement and repo.Start interleaved on one fsync-on server; writes bench/out/start-floor.txt.
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	mkdir -p $(BENCH_OUT)
	cd tests && KFS_START_FLOOR=1 GOWORK=off go test -count=1 -run '^TestStartFloor$$' -v -timeout 60m ./bench/ 2>&1 \
		| grep -vE '^(=== |[0-9]{4}/[0-9]{2}/[0-9]{2} |  [A-Z][A-Za-z ]+: |Testcontainers|github.com/testcontainers)' \
		| tee $(CURDIR)/$(BENCH_OUT)/start-floor.txt

.PHONY: bench-purge
bench-purge: ## Retention while serving (issue 40): a paced run (PURGE_RATE 150/s, PURGE_SECONDS 120) on PURGE_HISTORY (10^6) old attempts, alone and beside `kfsdb purge --all-tenants` (PURGE_BATCH, PURGE_PAUSE), PURGE_ROUNDS (2) interleaved, fsync-on server; writes bench/out/purge.txt.
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	scripts/bench-purge.sh $(BENCH_OUT)/purge.txt

.PHONY: bench-wakeup
bench-wakeup: ## An idle relay's wake-up latency: Start on the pool, a caller's commit, a locked due row's unlock (BENCH_COUNT runs).
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	mkdir -p $(BENCH_OUT)
	cd tests && GOWORK=off go test -run '^$$' -bench 'BenchmarkWakeup' -benchtime 50x -count $(BENCH_COUNT) -timeout 30m ./bench/ | tee $(CURDIR)/$(BENCH_OUT)/wakeup.txt

.PHONY: bench-fleet
bench-fleet: ## A fleet on one fsync-on server: FLEET_PROCESSES (50) kfsdb-bench work processes vs one process with as many slots, direct (LISTEN) and poll-only through PgBouncer, an idle fleet's cost, NOTIFY fan-out per Start (FLEET_* knobs: scripts/bench-fleet.sh); writes bench/out/fleet.txt.
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	scripts/bench-fleet.sh $(BENCH_OUT)/fleet.txt

# The failover tests make failover runs (go test -run): all of them by
# default; make failover-ci the plain test and each path with a
# synchronous standby.
FAILOVER_RUN ?= .
.PHONY: failover
failover: ## Primary failovers on a pg_auto_failover cluster (kfsdb-pgaf:$(PG_MAJOR), built if missing): the plain failover test, then load on direct-listen, direct-poll and relay-nats, sync and async standby, killed primary, promotion, rejoin, failover back; one line per path and mode; writes bench/out/failover.txt.
	@docker image inspect kfsdb-pgaf:$(PG_MAJOR) >/dev/null 2>&1 || $(MAKE) --no-print-directory pgaf-image
	mkdir -p $(BENCH_OUT)
	rm -f $(BENCH_OUT)/failover.txt
	@start=$$SECONDS; st=0; \
	(cd tests && KFS_FAILOVER=1 KFS_TEST_PGAF_IMAGE=kfsdb-pgaf:$(PG_MAJOR) KFS_FAILOVER_REPORT=$(CURDIR)/$(BENCH_OUT)/failover.txt \
		GOWORK=off go test -race -count=1 -timeout 90m -run '$(FAILOVER_RUN)' -v ./failover/ >$(CURDIR)/$(BENCH_OUT)/failover.log 2>&1) || st=$$?; \
	grep -E '^\s*--- (PASS|FAIL|SKIP)|^(FAIL|ok|panic)|failover node|Start errors seen' $(BENCH_OUT)/failover.log || true; \
	echo "== (whole output: $(BENCH_OUT)/failover.log; wall time $$((SECONDS - start)) s)"; \
	cat $(BENCH_OUT)/failover.txt 2>/dev/null || echo "failover: no summary lines (see $(BENCH_OUT)/failover.log)"; \
	exit $$st

.PHONY: failover-ci
failover-ci: ## make failover at CI size (in .ci/run, about 10 min): the plain failover test and each path with a synchronous standby, which must lose nothing.
	$(MAKE) --no-print-directory failover FAILOVER_RUN='TestFailover(Plain|UnderLoad)//^sync'

.PHONY: soak
soak: ## The long forms: model-based soak, fault injection and multi-process races (KFS_SOAK=1).
	$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE))
	cd tests && KFS_SOAK=1 KFS_MODEL_CHECKS=$${KFS_MODEL_CHECKS:-20000} GOWORK=off go test -race -count=1 -timeout 60m ./model/ ./faults/ ./multiproc/

.PHONY: bench-churn
bench-churn: ## An hour of churn on one fsync-on server (default autovacuum): kfsdb direct, the seed floor (and River) paced at CHURN_FRACTION (0.7) of the measured capacity (or CHURN_RATE) for CHURN_MINUTES (60), then with a snapshot held CHURN_HOLD_MINUTES (10) from the middle; sizes, dead tuples, autovacuums, plans, p50/p99 per minute; bench/out/churn/.
	scripts/bench-churn.sh

.PHONY: loadgen-longtx
loadgen-longtx: ## Relay and direct delivery (LOADGEN_DELIVERIES, default relay postgres): throughput, p50/p99 and dead tuples with and without a snapshot held open for the whole run (the hour-long form: make bench-churn).
	$(if $(KFS_BENCH_DATABASE_URL),,$(call ensure-image,$(KFS_TEST_POSTGRES_IMAGE)))
	mkdir -p $(BENCH_OUT)
	cd tests && KFS_LOADGEN=1 GOWORK=off go test -count=1 -run '^TestLongTransaction$$' -v -timeout 30m ./bench/ \
		| tee $(CURDIR)/$(BENCH_OUT)/longtx.txt
