#!/usr/bin/env bash
# A fleet of worker processes on one fsync-on server (issue 40 item 4):
# FLEET_PROCESSES `kfsdb-bench work` processes (1 worker x FLEET_SLOTS
# slots each, the stand-in handler) against one process with the same
# total slots, under the same producers (tests/bench TestFleet calls
# repo.Start, paced to each of FLEET_RATES and unpaced), for each
# FLEET_MODES:
#   direct     each process its own pool straight to PostgreSQL, LISTEN
#   pgbouncer  --poll-only through PgBouncer in transaction mode
#              (Debian's /usr/sbin/pgbouncer, default_pool_size
#              FLEET_PGBOUNCER_POOL)
#   idle       the fleet with nothing due for FLEET_IDLE_SECONDS (direct,
#              and poll-only through PgBouncer when that mode is chosen)
#   fanout     Start's latency and throughput with 0, 1 and
#              FLEET_PROCESSES idle listening processes, and the fetches
#              (wake-ups) each Start causes, paced and in an unpaced
#              burst: fetches per Start with and without the idle polls,
#              notifications by kind (naming a listener or everyone),
#              each process's reasons to fetch (observe.SourceWoken*,
#              SourceIdlePolls, SourceShortWaits, SourceRechecks, scraped
#              from --metrics-listen), registrations, and the statements
#              that held every registration when a commit found none free
# Latency is Start -> the completion's commit (track_commit_timestamp);
# statements from pg_stat_statements, connections from pg_stat_activity
# (application_name kfsdb-fleet-worker), server CPU from the container's
# cgroup, as scripts/bench-lifecycle.sh reads it.
#
# Usage: scripts/bench-fleet.sh [OUT]   (make bench-fleet)
# Knobs (defaults): FLEET_PROCESSES (50), FLEET_SLOTS (8), FLEET_SECONDS
# (30), FLEET_RATES ("0 150 300"; 0 is unpaced), FLEET_PRODUCERS (8),
# FLEET_IDLE_SECONDS (60), FLEET_MODES ("direct pgbouncer idle fanout"),
# FLEET_STEP_DELAY (10ms, per checkpoint of the stand-in handler),
# FLEET_POLL_INTERVAL (the source's, 1s), FLEET_POLL_JITTER (the
# source's, 0), FLEET_PGBOUNCER_POOL (20), FLEET_PGBOUNCER_POLL_INTERVAL
# (100ms: a poll-only source waits that long for work it was not woken
# for), FLEET_WAKEUPS ("held targeted broadcast": the wake-up checks of
# migrations 0013, 0010 and 0007, for direct and fanout),
# FLEET_FANOUT_DIAGNOSE (1; 0 leaves the wake-up function unrecorded),
# FLEET_FANOUT_LISTENERS ("0 1 FLEET_PROCESSES": the idle fleets fanout
# measures),
# FLEET_FANOUT_STARTS (200),
# FLEET_FANOUT_GAP (50ms), FLEET_FANOUT_SECONDS (5), FLEET_MAX_CONNS (each
# fleet process's pool; default 2*slots+4), FLEET_MAX_CONNECTIONS (the
# server's max_connections, 1500). Without KFS_BENCH_DATABASE_URL it
# starts an fsync-on server and removes it after.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-bench/out/fleet.txt}
mkdir -p "$(dirname "$out")"
image=${KFS_TEST_POSTGRES_IMAGE:-kfsdb-postgres:17}
export GOWORK=off

bin=$(mktemp -d "${TMPDIR:-/tmp}/kfsdb-bench-fleet.XXXXXX")
container=
cleanup() {
	[ -n "$container" ] && docker rm -fv "$container" >/dev/null 2>&1 || true
	rm -rf "$bin"
}
trap cleanup EXIT

echo "== building kfsdb-bench"
(cd bench/kfsdb-bench && go build -o "$bin/kfsdb-bench" .)

url=${KFS_BENCH_DATABASE_URL:-}
cgroup=
if [ -z "$url" ]; then
	container=kfsdb-bench-fleet-$$
	docker run -d --name "$container" -e POSTGRES_PASSWORD=bench \
		--mount type=volume,dst=/var/lib/postgresql/data \
		-p 127.0.0.1::5432 "$image" postgres -c shared_buffers=128MB \
		-c max_connections="${FLEET_MAX_CONNECTIONS:-1500}" -c shared_preload_libraries=pg_stat_statements \
		-c track_commit_timestamp=on >/dev/null
	port=$(docker port "$container" 5432/tcp | head -n1 | sed 's/.*://')
	url="postgres://postgres:bench@127.0.0.1:$port/postgres?sslmode=disable"
	for _ in $(seq 1 60); do
		psql "$url" -Atqc 'SELECT 1' >/dev/null 2>&1 && break
		sleep 1
	done
	id=$(docker inspect --format '{{.Id}}' "$container")
	for c in "/sys/fs/cgroup/cpuacct/docker/$id/cpuacct.usage" "/sys/fs/cgroup/system.slice/docker-$id.scope/cpu.stat"; do
		[ -r "$c" ] && cgroup=$c && break
	done
fi
psql "$url" -Atqc 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >/dev/null 2>&1 || true
echo "== server: $(psql "$url" -Atqc 'SELECT version()' | cut -d' ' -f1-2), fsync $(psql "$url" -Atqc 'SHOW fsync'), track_commit_timestamp $(psql "$url" -Atqc 'SHOW track_commit_timestamp'), max_connections $(psql "$url" -Atqc 'SHOW max_connections'), cgroup ${cgroup:-none}"

# TestMain (tests/bench) creates and migrates a database of its own on the
# server and drops it after; KFS_LOADGEN=1 makes it do so without -bench.
(cd tests && KFS_LOADGEN=1 KFS_FLEET=1 KFS_FLEET_BIN="$bin/kfsdb-bench" KFS_BENCH_DATABASE_URL="$url" KFS_BENCH_CPU_FILE="$cgroup" \
	go test -count=1 -run '^TestFleet$' -v -timeout 6h ./bench/) 2>&1 | tee "$out"
grep -q '^--- PASS: TestFleet' "$out" || { echo "bench-fleet: TestFleet did not pass (see $out)" >&2; exit 1; }
