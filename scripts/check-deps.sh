#!/usr/bin/env bash
# Check that importers of the root module github.com/knowledgefs/kfsdb never
# get the development-only dependencies (sqlc, goose, testcontainers, the
# Docker client) nor Prometheus' client_golang (module observe/prom) nor
# the OpenTelemetry SDK (module observe/otel) nor nats.go (module natsjs)
# in their package or module graph.
#
#   (a) `go list -deps` over every package of the root module (GOWORK=off)
#       must not contain a forbidden package path;
#   (b) a throwaway consumer module that requires kfsdb (replaced by this
#       checkout) and imports its public packages must, after `go mod tidy`,
#       have no forbidden module in `go list -m all`;
#   (c) the deploy binary, cmd/kfsdb built as operators build it, must link
#       no test harness and nothing that runs a handler, a relay or a load:
#       `go version -m` lists no testcontainers, moby or docker module (nor
#       sqlc, chromedp, nats-server, nats.go, natsjs, the OpenTelemetry SDK,
#       the tests module or the kfsdb-bench module, which holds work, relay,
#       bench and the load driver), and `go version -m` names no package of
#       those. goose is expected there (kfsdb migrate), and client_golang
#       (--metrics-listen). Prints the binary's size and module count;
#   (f) the bench binary, bench/kfsdb-bench, must link no testcontainers,
#       moby, docker or NATS server (it uses a real broker's URL). Prints its
#       size.
#
# Exits non-zero on any violation. Run from anywhere: scripts/check-deps.sh
set -euo pipefail

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

# client_golang belongs to the separate observe/prom module only, the
# OpenTelemetry SDK to observe/otel (for its tests), nats.go and
# nats-server to natsjs (and its tests) only.
forbidden='sqlc|goose|testcontainers|docker|moby|prometheus/client_golang|go.opentelemetry.io/otel/sdk|nats-io'
# What the kfsdb binary must not link: the harness, its Docker client, the
# browser driver of tests/console and the NATS server of natsjs's tests.
binary_forbidden='sqlc|testcontainers|docker|moby|chromedp|knowledgefs/kfsdb/tests|nats-io|knowledgefs/kfsdb/natsjs|go.opentelemetry.io/otel/sdk|knowledgefs/kfsdb/bench'
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

echo "== (f) the bench binary bench/kfsdb-bench"
check_binary kfsdb-bench bench/kfsdb-bench "$bench_forbidden"

if [ "$fail" -ne 0 ]; then
	echo "check-deps: FAILED" >&2
	exit 1
fi
echo "check-deps: OK (no sqlc, goose, testcontainers, docker, client_golang, OpenTelemetry SDK or nats for importers; no test harness, NATS or load driver in the kfsdb binary; no containers or NATS server in kfsdb-bench)"
