#!/usr/bin/env bash
# Check that importers of the root module github.com/knowledgefs/kfsdb never
# get the development-only dependencies (sqlc, goose, testcontainers, the
# Docker client) nor the adapters under adapters/ (each its own module):
# Prometheus' client_golang (module adapters/prom), the OpenTelemetry SDK
# (module adapters/otel), nats.go (module adapters/natsjs), in their package
# or module graph.
#
#   (a) `go list -deps` over every package of the root module (GOWORK=off)
#       must not contain a forbidden package path;
#   (b) a throwaway consumer module that requires kfsdb (replaced by this
#       checkout) and imports its public packages must, after `go mod tidy`,
#       have no forbidden module in `go list -m all`;
#   (c) the deploy binary, cmd/kfsdb built as operators build it, must link
#       no test harness and nothing that runs a handler, a relay or a load:
#       `go version -m` lists no testcontainers, moby or docker module (nor
#       sqlc, chromedp, nats-server, nats.go, adapters/natsjs, the
#       OpenTelemetry SDK, the tests module or the kfsdb-bench module, which
#       holds work, relay, bench and the load driver), and `go version -m` names no package of
#       those. goose is expected there (kfsdb migrate), and client_golang
#       (--metrics-listen). Prints the binary's size and module count;
#   (d) an application that migrates with kfsdb: a throwaway consumer that
#       requires the root module and the migrate module only, and imports
#       repo, worker, pgsource, db/migrations and migrate. Its package graph
#       (what is compiled into the application) must have no test harness,
#       Docker client, NATS, Prometheus, OpenTelemetry, sqlc or adapter
#       package. Its module graph (`go list -m all`) must have no
#       testcontainers, NATS, client_golang, sqlc, nor kfsdb's tests,
#       cmd/kfsdb or adapters/* module; goose is expected, and the only
#       moby/docker, OpenTelemetry or Prometheus modules allowed are those
#       that goose's own go.mod requires (its CLI's drivers and its test
#       tooling, never built): every one must be unreachable in
#       `go mod graph` once goose's edges are removed.
#       Prints both counts;
#   (e) testcontainers reaches an application only through the test kit
#       (module kfsdbtest): no other released module (the root, migrate,
#       cmd/kfsdb, the adapters) has it in its module graph, and an
#       application whose tests use the kit gets it in its tests' packages,
#       not in its build;
#   (f) the bench binary, bench/kfsdb-bench, must link no testcontainers,
#       moby, docker or NATS server (it uses a real broker's URL). Prints its
#       size;
#   (g) no released module requires a module that is never tagged (tests,
#       bench/kfsdb-bench, bench/river, tools), directly or through another:
#       its `go list -m all` names none, and its go.mod neither requires nor
#       replaces one (an importer could not resolve it: `unknown revision
#       tests/v0.0.0`). Their tests that need the harness live in the tests
#       module (tests/adapters, tests/cli, tests/consolehttp).
#
# Exits non-zero on any violation. Run from anywhere: scripts/check-deps.sh
set -euo pipefail

# The modules that are tagged and released (docs/RELEASING.md), and the
# path pattern of kfsdb's modules that never are.
released_modules=(. migrate kfsdbtest cmd/kfsdb adapters/prom adapters/otel adapters/natsjs)
never_tagged='^github\.com/knowledgefs/kfsdb/(tests|bench/kfsdb-bench|bench/river|tools)( |$)'

# Packages the consumer imports; add one line per new public package.
consumer_imports=(
	github.com/knowledgefs/kfsdb/kfstype
	github.com/knowledgefs/kfsdb/db/gen
	github.com/knowledgefs/kfsdb/db/migrations
	github.com/knowledgefs/kfsdb/repo
	github.com/knowledgefs/kfsdb/relay
	github.com/knowledgefs/kfsdb/worker
	github.com/knowledgefs/kfsdb/pgsource
	github.com/knowledgefs/kfsdb/memqueue
	github.com/knowledgefs/kfsdb/observe
)

# client_golang belongs to the separate adapters/prom module only, nats.go
# to adapters/natsjs only, and the OpenTelemetry SDK and nats-server to the
# tests module (the adapters' tests, tests/adapters); no adapter module
# reaches an importer of the root module.
forbidden='sqlc|goose|testcontainers|docker|moby|prometheus/client_golang|go.opentelemetry.io/otel/sdk|nats-io|knowledgefs/kfsdb/adapters/'
# What the kfsdb binary must not link: the harness, its Docker client, the
# browser driver of tests/console and the NATS server of the adapters'
# tests (tests/adapters/natsjs).
binary_forbidden='sqlc|testcontainers|docker|moby|chromedp|knowledgefs/kfsdb/tests|nats-io|knowledgefs/kfsdb/adapters/natsjs|go.opentelemetry.io/otel/sdk|knowledgefs/kfsdb/bench'
# What kfsdb-bench must not link: the harness's containers and a NATS server.
bench_forbidden='sqlc|testcontainers|docker|moby|chromedp|nats-server'

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export GOWORK=off
fail=0

echo "== (a) package graph of github.com/knowledgefs/kfsdb/..."
deps=$(cd "$repo" && go list -deps github.com/knowledgefs/kfsdb/...)
echo "root module packages and dependencies: $(wc -l <<<"$deps") packages"
if bad=$(grep -E "$forbidden" <<<"$deps"); then
	echo "FORBIDDEN packages in the root module's dependencies:" >&2
	sed 's/^/  /' <<<"$bad" >&2
	fail=1
fi

echo "== (b) throwaway consumer module"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kfsdb-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
go_version=$(cd "$repo" && go list -m -f '{{.GoVersion}}')
cat >"$tmp/go.mod" <<GOMOD
module example.com/kfsdbconsumer

go $go_version

require github.com/knowledgefs/kfsdb v0.0.0

replace github.com/knowledgefs/kfsdb => $repo
GOMOD
{
	echo "// Package main imports kfsdb's public packages, nothing else."
	echo "package main"
	echo
	echo "import ("
	for p in "${consumer_imports[@]}"; do
		echo "	_ \"$p\""
	done
	echo ")"
	echo
	echo "func main() {}"
} >"$tmp/main.go"

(cd "$tmp" && GOFLAGS=-mod=mod go mod tidy)
(cd "$tmp" && go build ./...)
mods=$(cd "$tmp" && go list -m all)
echo "consumer module graph: $(wc -l <<<"$mods") modules"
if bad=$(grep -E "$forbidden" <<<"$mods"); then
	echo "FORBIDDEN modules in the consumer's module graph:" >&2
	sed 's/^/  /' <<<"$bad" >&2
	fail=1
fi
pkgs=$(cd "$tmp" && go list -deps ./...)
if bad=$(grep -E "$forbidden" <<<"$pkgs"); then
	echo "FORBIDDEN packages in the consumer's package graph:" >&2
	sed 's/^/  /' <<<"$bad" >&2
	fail=1
fi

# check_binary NAME DIR FORBIDDEN builds the binary NAME from DIR (a module
# of this checkout), prints its size and how many modules it links (the
# main module (mod), its dependencies (dep) and their replacements (=>) in
# `go version -m`), and fails on a linked module matching FORBIDDEN.
check_binary() {
	local name=$1 dir=$2 forbidden=$3 bin="$tmp/$1" linked size bad
	(cd "$repo/$dir" && go build -o "$bin" .)
	linked=$(go version -m "$bin" | awk '$1 == "mod" || $1 == "dep" || $1 == "=>" { print $2 }')
	size=$(wc -c <"$bin")
	echo "$name binary: $size bytes ($((size / 1024 / 1024)) MiB), $(wc -l <<<"$linked") modules linked"
	if bad=$(grep -E "$forbidden" <<<"$linked"); then
		echo "FORBIDDEN modules linked into the $name binary (go version -m):" >&2
		sed 's/^/  /' <<<"$bad" >&2
		fail=1
	fi
}

echo "== (c) the deploy binary cmd/kfsdb"
check_binary kfsdb cmd/kfsdb "$binary_forbidden"
# The load driver and the stand-in handler by package, wherever they live.
if bad=$(cd "$repo/cmd/kfsdb" && go list -deps . | grep -E '/(loadgen|delivery|benchcli|natsjs)$'); then
	echo "FORBIDDEN packages in the kfsdb binary (load driver, delivery, NATS):" >&2
	sed 's/^/  /' <<<"$bad" >&2
	fail=1
fi

echo "== (d) application consumer: repo, worker, pgsource, db/migrations and the migrate module"
app="$tmp/app"
mkdir -p "$app"
cat >"$app/go.mod" <<GOMOD
module example.com/kfsdbapp

go $go_version

require (
	github.com/knowledgefs/kfsdb v0.0.0
	github.com/knowledgefs/kfsdb/migrate v0.0.0
)

replace (
	github.com/knowledgefs/kfsdb => $repo
	github.com/knowledgefs/kfsdb/migrate => $repo/migrate
)
GOMOD
cat >"$app/main.go" <<'GOSRC'
// Package main is an application that migrates with kfsdb and runs a
// worker on PostgreSQL: nothing else of kfsdb.
package main

import (
	_ "github.com/knowledgefs/kfsdb/db/migrations"
	_ "github.com/knowledgefs/kfsdb/migrate"
	_ "github.com/knowledgefs/kfsdb/pgsource"
	_ "github.com/knowledgefs/kfsdb/repo"
	_ "github.com/knowledgefs/kfsdb/worker"
)

func main() {}
GOSRC
(cd "$app" && GOFLAGS=-mod=mod go mod tidy)
(cd "$app" && go build ./...)
app_pkgs=$(cd "$app" && go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./... | sed '/^$/d')
app_pkg_forbidden='testcontainers|docker|moby|nats-io|prometheus|opentelemetry|sqlc|knowledgefs/kfsdb/tests|knowledgefs/kfsdb/cmd|knowledgefs/kfsdb/adapters/'
echo "application package graph: $(wc -l <<<"$app_pkgs") packages outside the standard library"
if bad=$(grep -E "$app_pkg_forbidden" <<<"$app_pkgs"); then
	echo "FORBIDDEN packages compiled into the application:" >&2
	sed 's/^/  /' <<<"$bad" >&2
	fail=1
fi
app_mods=$(cd "$app" && go list -m all)
echo "application module graph (go list -m all): $(wc -l <<<"$app_mods") modules"
app_mod_forbidden='testcontainers|nats-io|prometheus/client_golang|sqlc|knowledgefs/kfsdb/tests|knowledgefs/kfsdb/cmd|knowledgefs/kfsdb/adapters/'
if bad=$(grep -E "$app_mod_forbidden" <<<"$app_mods"); then
	echo "FORBIDDEN modules in the application's module graph:" >&2
	sed 's/^/  /' <<<"$bad" >&2
	fail=1
fi
# Modules reachable from the application without going through goose.
reachable=$(cd "$app" && go mod graph | awk '
	{ from = $1; to = $2; sub(/@.*/, "", to); adj[from] = adj[from] " " $2; if (!(from in seen0)) { seen0[from] = 1; if (from !~ /@/) root = from } }
	END {
		queue[0] = root; head = 0; tail = 1; seen[root] = 1
		while (head < tail) {
			node = queue[head++]; p = node; sub(/@.*/, "", p)
			if (p == "github.com/pressly/goose/v3") continue
			print p
			n = split(adj[node], next_, " ")
			for (i = 1; i <= n; i++) if (!(next_[i] in seen)) { seen[next_[i]] = 1; queue[tail++] = next_[i] }
		}
	}' | sort -u)
goose_only='moby|docker|opentelemetry|prometheus'
goose_only_mods=$(awk '{print $1}' <<<"$app_mods" | grep -E "$goose_only" || true)
if [ -n "$goose_only_mods" ]; then
	if bad=$(grep -Fxf <(printf '%s\n' "$reachable") <<<"$goose_only_mods"); then
		echo "FORBIDDEN modules reachable in the application's module graph other than through goose's go.mod:" >&2
		sed 's/^/  /' <<<"$bad" >&2
		fail=1
	fi
	echo "  of which only through goose v3's own go.mod (its CLI drivers and test tooling; none compiled in): $(wc -l <<<"$goose_only_mods") moby/docker/OpenTelemetry/Prometheus modules"
fi
if ! grep -q '^github.com/pressly/goose/v3 ' <<<"$app_mods"; then
	echo "expected goose in the application's module graph (the migrate module runs it)" >&2
	fail=1
fi

echo "== (e) the test kit is the only module that brings testcontainers to an application"
# No released module but the kit may have testcontainers even in its module
# graph; an application that uses the kit in its tests must get it in its
# tests' packages only.
for m in "${released_modules[@]}"; do
	[ "$m" = kfsdbtest ] && continue
	mods=$(cd "$repo/$m" && go list -m all 2>/dev/null) || continue # (g) reports it
	if grep -q testcontainers <<<"$mods"; then
		echo "FORBIDDEN: module $m has testcontainers in its module graph" >&2
		fail=1
	fi
done
kit="$tmp/kitconsumer"
mkdir -p "$kit"
cat >"$kit/go.mod" <<GOMOD
module example.com/kfsdbkitconsumer

go $(cd "$repo/kfsdbtest" && go list -m -f '{{.GoVersion}}')

require (
	github.com/knowledgefs/kfsdb v0.0.0
	github.com/knowledgefs/kfsdb/kfsdbtest v0.0.0
	github.com/knowledgefs/kfsdb/migrate v0.0.0
)

replace github.com/knowledgefs/kfsdb => $repo

replace github.com/knowledgefs/kfsdb/kfsdbtest => $repo/kfsdbtest

replace github.com/knowledgefs/kfsdb/migrate => $repo/migrate
GOMOD
cat >"$kit/app.go" <<'GO'
// Package app is an application: its code imports the library and the
// migrations, its tests the kit.
package app

import (
	_ "github.com/knowledgefs/kfsdb/migrate"
	_ "github.com/knowledgefs/kfsdb/pgsource"
	_ "github.com/knowledgefs/kfsdb/repo"
	_ "github.com/knowledgefs/kfsdb/worker"
)
GO
cat >"$kit/app_test.go" <<'GO'
package app

import (
	"testing"

	"github.com/knowledgefs/kfsdb/kfsdbtest"
)

func TestMain(m *testing.M) { kfsdbtest.Main(m) }
GO
(cd "$kit" && GOFLAGS=-mod=mod go mod tidy && go vet ./...)
app_pkgs=$(cd "$kit" && go list -deps .)
test_pkgs=$(cd "$kit" && go list -deps -test .)
echo "application using the kit: $(cd "$kit" && go list -m all | wc -l) modules; its build $(wc -l <<<"$app_pkgs") packages, with its tests $(wc -l <<<"$test_pkgs")"
if bad=$(grep -E 'testcontainers|docker|moby' <<<"$app_pkgs"); then
	echo "FORBIDDEN packages in the application's build (not its tests):" >&2
	sed 's/^/  /' <<<"$bad" >&2
	fail=1
fi
if ! grep -q 'testcontainers' <<<"$test_pkgs"; then
	echo "expected the kit to bring testcontainers to the application's tests" >&2
	fail=1
fi

echo "== (f) the bench binary bench/kfsdb-bench"
check_binary kfsdb-bench bench/kfsdb-bench "$bench_forbidden"

echo "== (g) no released module requires a module that is never tagged"
for m in "${released_modules[@]}"; do
	if ! mods=$(cd "$repo/$m" && go list -m all 2>&1); then
		echo "FORBIDDEN: released module $m: its module graph does not resolve even with its replace lines:" >&2
		sed 's/^/  /' <<<"$mods" >&2
		fail=1
		continue
	fi
	# go.mod's own require and replace lines too: a replace of an untagged
	# module names it even when nothing requires it yet.
	named=$(cd "$repo/$m" && go mod edit -json | sed -nE 's/^[[:space:]]*"Path": "([^"]+)".*/\1/p')
	if bad=$(grep -E "$never_tagged" <<<"$mods"$'\n'"$named" | sort -u); then
		echo "FORBIDDEN: released module $m requires or replaces a module that is never tagged:" >&2
		sed 's/^/  /' <<<"$bad" >&2
		fail=1
	else
		echo "module $m: $(wc -l <<<"$mods") modules in its graph, none never tagged"
	fi
done

if [ "$fail" -ne 0 ]; then
	echo "check-deps: FAILED" >&2
	exit 1
fi
echo "check-deps: OK (no sqlc, goose, testcontainers, docker, client_golang, OpenTelemetry SDK, nats or adapter module for importers; no test harness, NATS or load driver in the kfsdb binary; no containers or NATS server in kfsdb-bench; an application with the migrate module compiles in no test, broker, metrics or tracing package; testcontainers only through the test kit, in tests; no released module requires the tests module or another never tagged)"
