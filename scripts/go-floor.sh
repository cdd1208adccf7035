#!/usr/bin/env bash
# Measures the oldest Go release that builds and tests each released module
# (`make go-floor`): in a copy of HEAD, each module's go directive is set to
# its candidate and the candidate toolchain (fetched through the module
# proxy as GOTOOLCHAIN=goX.Y.Z) runs `go vet ./...` (which type-checks the
# tests too) and the module's tests that need no database. A module passes
# at its candidate and must be refused one minor release below it, where
# the go command names the dependency (or language feature) that needs
# more. The go directives in the tree are what this prints as "floor".
#
# Usage: scripts/go-floor.sh [module ...]   (default: every released module)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
# kfsdbtest's own tests start a PostgreSQL container (make exports these).
export KFS_TEST_POSTGRES_IMAGE=${KFS_TEST_POSTGRES_IMAGE:-kfsdb-postgres:17}
export TESTCONTAINERS_RYUK_DISABLED=${TESTCONTAINERS_RYUK_DISABLED:-true}

# module -> the go directive it states; the release below is tried too.
declare -A floor
released=(. migrate kfsdbtest adapters/prom adapters/otel adapters/natsjs cmd/kfsdb)
for m in "${released[@]}"; do
	floor[$m]=$(awk '$1 == "go" {print $2; exit}' "$m/go.mod")
done
[ "$#" -gt 0 ] && released=("$@")

below() { # 1.26.0 -> 1.25.0 (the first release of the minor below)
	local major minor
	IFS=. read -r major minor _ <<<"$1"
	echo "$major.$((minor - 1)).0"
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kfsdb-go-floor.XXXXXX")
trap 'chmod -R u+w "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
fail=0
for m in "${released[@]}"; do
	want=${floor[$m]:?"$m is not a released module"}
	for try in "$want" "$(below "$want")"; do
		tree="$scratch/$try-$(echo "$m" | tr / _)"
		mkdir -p "$tree"
		git -C "$repo" archive HEAD | tar -x -C "$tree"
		sed -i "s/^go [0-9.]*$/go $try/" "$tree/$m/go.mod"
		log="$tree.log"
		# Unit tests only: packages whose tests need no container (the
		# database tests live in the tests module, which is not released).
		if (cd "$tree/$m" && export GOWORK=off GOTOOLCHAIN="go$try" GOFLAGS=-mod=mod &&
			go vet ./... && go test -count=1 -short ./... ) >"$log" 2>&1; then
			result="builds and tests"
		else
			result="refused: $(grep -m1 'requires go' "$log" || grep -v -m1 'downloading' "$log" || tail -n 1 "$log")"
		fi
		printf 'go-floor: %-16s go%-8s %s\n' "$m" "$try" "$result"
		if [ "$try" = "$want" ] && [ "$result" != "builds and tests" ]; then
			echo "go-floor: FAIL: $m does not build and test with the go $want its go.mod states:" >&2
			tail -n 20 "$log" >&2
			fail=1
		fi
		if [ "$try" != "$want" ] && [ "$result" = "builds and tests" ]; then
			echo "go-floor: FAIL: $m also builds and tests with go $try: lower its go directive" >&2
			fail=1
		fi
	done
	echo "go-floor: $m floor go $want"
done
exit "$fail"
