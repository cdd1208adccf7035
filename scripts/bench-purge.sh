#!/usr/bin/env bash
# Retention while serving (issue 40, item 2): `kfsdb purge` deleting old
# terminal attempts in bounded batches during a paced lifecycle run, against
# the same run without it, on one fsync-on server (tests/bench
# TestPurgeWhileServing: the knobs, what each run line holds).
#
# Usage: scripts/bench-purge.sh [OUT]   (make bench-purge)
# Knobs (environment): PURGE_HISTORY [1000000], PURGE_RATE [150],
# PURGE_SECONDS [120], PURGE_ROUNDS [2], PURGE_BATCH [1000],
# PURGE_PAUSE [100ms], PURGE_OLDER_THAN [24h].
# Without KFS_BENCH_DATABASE_URL it starts a server like
# scripts/bench-lifecycle.sh's (fsync on, data on a Docker volume,
# track_commit_timestamp = on for the latency at the commit) and removes it
# after. OUT (default bench/out/purge.txt) gets the run lines and summary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-bench/out/purge.txt}
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
image=${KFS_TEST_POSTGRES_IMAGE:-kfsdb-postgres:17}
export GOWORK=off

bin=$(mktemp -d "${TMPDIR:-/tmp}/kfsdb-bench-purge.XXXXXX")
container=
cleanup() {
	[ -n "$container" ] && docker rm -fv "$container" >/dev/null 2>&1 || true
	rm -rf "$bin"
}
trap cleanup EXIT

echo "== building the deploy binary (kfsdb purge)"
(cd cmd/kfsdb && go build -o "$bin/kfsdb" .)

url=${KFS_BENCH_DATABASE_URL:-}
cpu_file=
if [ -z "$url" ]; then
	container=kfsdb-bench-purge-$$
	labels=()
	[ -n "${KFS_TEST_RUN:-}" ] && labels=(--label "kfsdb.test-run=$KFS_TEST_RUN")
	docker run -d --name "$container" "${labels[@]}" -e POSTGRES_PASSWORD=bench \
		--mount type=volume,dst=/var/lib/postgresql/data \
		-p 127.0.0.1::5432 "$image" postgres -c shared_buffers=128MB \
		-c max_connections=200 -c track_commit_timestamp=on >/dev/null
	port=$(docker port "$container" 5432/tcp | head -n1 | sed 's/.*://')
	url="postgres://postgres:bench@127.0.0.1:$port/postgres?sslmode=disable"
	for _ in $(seq 1 60); do
		docker exec "$container" pg_isready -q -U postgres -h 127.0.0.1 >/dev/null 2>&1 && break
		sleep 1
	done
	id=$(docker inspect --format '{{.Id}}' "$container")
	for c in "/sys/fs/cgroup/cpuacct/docker/$id/cpuacct.usage" "/sys/fs/cgroup/system.slice/docker-$id.scope/cpu.stat"; do
		[ -r "$c" ] && cpu_file=$c && break
	done
fi

echo "== TestPurgeWhileServing (output: $out)"
cd tests
KFS_LOADGEN=1 KFS_PURGE=1 KFS_BENCH_DATABASE_URL="$url" KFS_PURGE_KFSDB="$bin/kfsdb" KFS_BENCH_CPU_FILE="$cpu_file" \
	go test -count=1 -run '^TestPurgeWhileServing$' -v -timeout 300m ./bench/ 2>&1 \
	| grep --line-buffered -vE '^(=== |[0-9]{4}/[0-9]{2}/[0-9]{2} |  [A-Z][A-Za-z ]+: |Testcontainers|github.com/testcontainers)' \
	| tee "$out"
grep -q '^purge-summary:' "$out" || { echo "bench-purge: no summary (failed run, see $out)" >&2; exit 1; }
