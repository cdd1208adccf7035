#!/usr/bin/env bash
# An hour of churn (issue 40 item 3), on one fsync-on server: kfsdb's
# direct delivery, the seed schema's floor (../shared/bench/lifecyclefloor,
# built from FLOOR_DIR) and River (bench/river), one after the other, each
# paced at CHURN_FRACTION of kfsdb's measured capacity for CHURN_MINUTES,
# (or, with CHURN_TOGETHER=1, all at once in their own databases, sharing
# the rate), then again with a REPEATABLE READ snapshot held for CHURN_HOLD_MINUTES
# from the middle. The server keeps PostgreSQL's default autovacuum. A
# sampler reads each run's database from outside every minute (sizes,
# dead tuples, autovacuum runs, the claim statement's plan, p50/p99 of
# start → succeeded at the commit): tests/bench TestChurn (churn_test.go)
# documents the knobs and what it measures.
#
# Usage: scripts/bench-churn.sh   (make bench-churn)
# Without KFS_BENCH_DATABASE_URL it starts an fsync-on server with its data
# on a Docker volume, track_commit_timestamp on and
# track_activity_query_size large enough for the claim statements' text
# (the sampler explains them from pg_stat_activity), and removes it after.
# Output: bench/out/churn/ (minutes.csv, plans-*.txt, *.log, summary.md,
# run.txt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
out=${CHURN_OUT:-$repo/bench/out/churn}
mkdir -p "$out"
FLOOR_DIR=${FLOOR_DIR:-$repo/../shared/bench/lifecyclefloor}
image=${KFS_TEST_POSTGRES_IMAGE:-kfsdb-postgres:17}
export GOWORK=off

bin=$(mktemp -d "${TMPDIR:-/tmp}/kfsdb-bench-churn.XXXXXX")
container=
cleanup() {
	[ -n "$container" ] && docker rm -fv "$container" >/dev/null 2>&1 || true
	rm -rf "$bin"
}
trap cleanup EXIT

echo "== building the floor, kfsdb (the floor migrates with it) and the River peer"
(cd cmd/kfsdb && go build -o "$bin/kfsdb" .)
(cd "$FLOOR_DIR" && go build -o "$bin/floor" .)
(cd bench/river && go build -o "$bin/riverbench" .)
(cd tests && go test -c -o "$bin/bench.test" ./bench/)

url=${KFS_BENCH_DATABASE_URL:-}
if [ -z "$url" ]; then
	container=kfsdb-bench-churn-$$
	docker run -d --name "$container" -e POSTGRES_PASSWORD=bench \
		--mount type=volume,dst=/var/lib/postgresql/data \
		-p 127.0.0.1::5432 "$image" postgres -c shared_buffers=128MB \
		-c max_connections=200 -c shared_preload_libraries=pg_stat_statements -c track_commit_timestamp=on \
		-c track_activity_query_size=65536 >/dev/null
	port=$(docker port "$container" 5432/tcp | head -n1 | sed 's/.*://')
	url="postgres://postgres:bench@127.0.0.1:$port/postgres?sslmode=disable"
	for _ in $(seq 1 60); do
		psql "$url" -Atqc 'SELECT 1' >/dev/null 2>&1 && break
		sleep 1
	done
fi
echo "== server: $(psql "$url" -Atqc 'SELECT version()' | cut -d' ' -f1-2), fsync $(psql "$url" -Atqc 'SHOW fsync'), track_commit_timestamp $(psql "$url" -Atqc 'SHOW track_commit_timestamp'), autovacuum $(psql "$url" -Atqc 'SHOW autovacuum') (naptime $(psql "$url" -Atqc 'SHOW autovacuum_naptime'), scale factor $(psql "$url" -Atqc 'SHOW autovacuum_vacuum_scale_factor'))"

rm -f "$out"/plans-*.txt
start=$SECONDS
st=0
(cd tests/bench && KFS_LOADGEN=1 KFS_CHURN=1 KFS_BENCH_DATABASE_URL="$url" CHURN_OUT="$out" \
	CHURN_FLOOR_BIN="$bin/floor" CHURN_KFSDB_BIN="$bin/kfsdb" CHURN_RIVER_BIN="$bin/riverbench" \
	"$bin/bench.test" -test.run '^TestChurn$' -test.count=1 -test.v -test.timeout 0) 2>&1 \
	| grep --line-buffered -vE '^(=== |[0-9]{4}/[0-9]{2}/[0-9]{2} )' | tee "$out/run.txt" || st=$?
echo "== wall time $((SECONDS - start)) s; output in ${out#"$repo"/}/ (minutes.csv, plans-*.txt, summary.md)"
exit $st
