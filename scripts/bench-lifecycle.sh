#!/usr/bin/env bash
# The lifecycle, side by side on one server: kfsdb's direct delivery
# (`kfsdb-bench bench --delivery postgres`), kfsdb's relay path (`--delivery
# relay`), the relay through NATS JetStream (`--delivery nats`, against
# tests/cmd/kfsdb-nats, an in-process JetStream server on loopback started
# here), direct delivery with metrics and tracing on (side
# `postgres+observe`: `--observe`), the seed schema's floor (side `floor`:
# ../shared/bench/lifecyclefloor, built from FLOOR_DIR at run time, the
# least work the verbatim schema allows with River's runtime shape) and
# River (bench/river), interleaved, ROUNDS rounds of each load
# (unpaced, then each rate of RATES), PRODUCERS producers and SLOTS worker
# slots for SECONDS each. Around every run it reads, from outside the
# programs and the same way for all three: the PostgreSQL container's CPU
# (cgroup cpuacct), the WAL written (pg_current_wal_lsn) and the statements
# executed (pg_stat_statements calls of sqlc's named statements, which
# both projects use), per completed item; and each program reports, over
# its own window (from the first insert to the drain), the WAL written and
# the container's CPU time (cgroup cpuacct, passed as KFS_BENCH_CPU_FILE),
# per completed item, measured the same way by both.
#
# Latency is start → succeeded at the completion's commit on every side:
# the server runs with track_commit_timestamp = on and kfsdb-bench bench and
# bench/river read pg_xact_commit_timestamp(xmin) of the completed row
# (p50_ms, p99_ms); River's finalized_at, stamped by its executor before
# its completer commits, is reported beside it (finalized_p50_ms,
# finalized_p99_ms). The floor's figure is its completed_at, now() of its
# completing statement, which commits on its own right after.
#
# Usage: scripts/bench-lifecycle.sh [OUT]   (make bench-lifecycle)
# Without KFS_BENCH_DATABASE_URL it starts an fsync-on server with its data
# on a Docker volume (as the official image keeps it) and removes it after.
# OUT (default bench/out/lifecycle.txt) gets one line per run; the summary
# (medians per load and side, ratios to River) goes to stdout and OUT.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
out=${1:-bench/out/lifecycle.txt}
mkdir -p "$(dirname "$out")"
ROUNDS=${ROUNDS:-3}
RATES=${RATES:-150 300}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
PRODUCERS=${PRODUCERS:-8}
SLOTS=${SLOTS:-8}
SIDES=${SIDES:-postgres floor postgres+observe relay nats river}
FLOOR_DIR=${FLOOR_DIR:-$repo/../shared/bench/lifecyclefloor}
image=${KFS_TEST_POSTGRES_IMAGE:-kfsdb-postgres:17}
export GOWORK=off

bin=$(mktemp -d "${TMPDIR:-/tmp}/kfsdb-bench-lifecycle.XXXXXX")
container=
nats_pid=
cleanup() {
	[ -n "$container" ] && docker rm -fv "$container" >/dev/null 2>&1 || true
	[ -n "$nats_pid" ] && kill "$nats_pid" 2>/dev/null && wait "$nats_pid" 2>/dev/null || true
	rm -rf "$bin"
}
trap cleanup EXIT

echo "== building kfsdb-bench and the River peer"
(cd bench/kfsdb-bench && go build -o "$bin/kfsdb-bench" .)
# The floor migrates its database with the project's own `kfsdb migrate up`.
(cd cmd/kfsdb && go build -o "$bin/kfsdb" .)
(cd bench/river && go build -o "$bin/riverbench" .)
if [[ " $SIDES " == *" floor "* ]]; then
	(cd "$FLOOR_DIR" && go build -o "$bin/floor" .)
fi
nats_url=
if [[ " $SIDES " == *" nats "* ]]; then
	(cd tests && go build -o "$bin/kfsdb-nats" ./cmd/kfsdb-nats)
	"$bin/kfsdb-nats" >"$bin/nats.log" 2>&1 &
	nats_pid=$!
	for _ in $(seq 1 100); do
		nats_url=$(head -n 1 "$bin/nats.log")
		[[ $nats_url == nats://* ]] && break
		sleep 0.1
	done
	[[ $nats_url == nats://* ]] || { echo "kfsdb-nats did not start:" >&2; cat "$bin/nats.log" >&2; exit 1; }
	echo "== NATS JetStream (in-process, loopback): $nats_url"
fi

url=${KFS_BENCH_DATABASE_URL:-}
cgroup=
if [ -z "$url" ]; then
	container=kfsdb-bench-lifecycle-$$
	docker run -d --name "$container" -e POSTGRES_PASSWORD=bench \
		--mount type=volume,dst=/var/lib/postgresql/data \
		-p 127.0.0.1::5432 "$image" postgres -c shared_buffers=128MB \
		-c max_connections=200 -c shared_preload_libraries=pg_stat_statements -c track_commit_timestamp=on >/dev/null
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
echo "== server: $(psql "$url" -Atqc 'SELECT version()' | cut -d' ' -f1-2), fsync $(psql "$url" -Atqc 'SHOW fsync'), track_commit_timestamp $(psql "$url" -Atqc 'SHOW track_commit_timestamp'), cgroup ${cgroup:-none}"

# calls counts the named (sqlc) statements executed since the last reset.
calls() { psql "$url" -Atqc "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '-- name:%'" 2>/dev/null || echo 0; }

# ms converts a Go duration (1.2s, 92ms, 850µs) to milliseconds.
ms() { awk -v d="$1" 'BEGIN {
	if (d ~ /µs$/) { sub(/µs$/, "", d); print d / 1000 }
	else if (d ~ /ms$/) { sub(/ms$/, "", d); print d + 0 }
	else if (d ~ /m[0-9.]+s$/) { split(d, p, "m"); sub(/s$/, "", p[2]); print (p[1] * 60 + p[2]) * 1000 }
	else if (d ~ /s$/) { sub(/s$/, "", d); print d * 1000 }
	else print d + 0 }'; }

# run SIDE RATE: one run, one line: side rate throughput p50ms p99ms completed cpu_us/item wal_bytes/item statements/item
run() {
	local side=$1 rate=$2 log="$bin/run.log"
	psql "$url" -Atqc 'SELECT pg_stat_statements_reset()' >/dev/null 2>&1 || true
	local s0 s1
	s0=$(calls)
	export KFS_BENCH_CPU_FILE=$cgroup
	case $side in
	floor)
		"$bin/floor" -url "$url" -kfsdb "$bin/kfsdb" -producers "$PRODUCERS" -workers "$SLOTS" -seconds "$SECONDS_PER_RUN" \
			-rate "$rate" >"$log" 2>&1 || { echo "run floor rate $rate failed:" >&2; cat "$log" >&2; exit 1; }
		local fl
		fl=$(grep -E '^floor rate=' "$log" | tail -n 1)
		[ -n "$fl" ] || { echo "run floor rate $rate: no result line:" >&2; cat "$log" >&2; exit 1; }
		# Its own line, in this script's fields (it counts its statements).
		echo "$fl" | awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
			printf "floor rate=%s throughput=%s p50_ms=%s p99_ms=%s completed=%s cpu_us_per_item=0 wal_bytes_per_item=%s statements_per_item=%s drain=%s finalized_p50_ms=0 finalized_p99_ms=0\n",
				f["rate"], f["throughput"], f["p50_ms"], f["p99_ms"], f["completed"], f["wal_bytes_per_item"], f["statements_per_item"], f["drain"] }'
		return ;;
	river)
		"$bin/riverbench" -url "$url" -producers "$PRODUCERS" -workers "$SLOTS" -seconds "$SECONDS_PER_RUN" \
			-fetch-cooldown 1ms -rate "$rate" >"$log" 2>&1 ;;
	*)
		# "default": whatever kfsdb-bench bench does without --delivery; a side
		# "D+observe" is delivery D with --observe.
		local delivery=() mode=${side%+observe}
		[ "$mode" = default ] || delivery=(--delivery "$mode")
		[ "$mode" = nats ] && delivery+=(--nats-url "$nats_url")
		[ "$mode" = "$side" ] || delivery+=(--observe)
		DATABASE_URL="$url" "$bin/kfsdb-bench" bench "${delivery[@]}" --producers "$PRODUCERS" --workers "$SLOTS" \
			--duration "${SECONDS_PER_RUN}s" --rate "$rate" >"$log" 2>&1 ;;
	esac
	s1=$(calls)
	local tput p done
	tput=$(grep -E '^\| (lifecycle )?throughput' "$log" | grep -oE '[0-9.]+ (attempts|jobs)/s' | cut -d' ' -f1)
	# At the commit where the program reports it, else its own figure.
	local pline fin=
	pline=$(grep -E 'committed p50 / p99' "$log" || grep -E 'succeeded p50 / p99|completed p50 / p99' "$log")
	p=$(echo "$pline" | head -n 1 | sed -E 's/.*\| ([^ ]+) \/ ([^ ]+) \|$/\1 \2/')
	fin=$(grep -E 'finalized_at p50 / p99' "$log" | sed -E 's/.*\| ([^ ]+) \/ ([^ ]+) \|$/\1 \2/' || true)
	done=$(grep -E '^\| (attempts started / succeeded|jobs inserted / completed)' "$log" | sed -E 's/.*\| [0-9]+ \/ ([0-9]+) \|$/\1/')
	if [ -z "$tput" ] || [ -z "$done" ]; then
		echo "run $side rate $rate failed:" >&2
		cat "$log" >&2
		exit 1
	fi
	local wal cpu drain
	drain=$(grep -E '^\| drain after the window' "$log" | grep -oE '[0-9.]+ (attempts|jobs)/s' | cut -d' ' -f1)
	wal=$(grep -E '^\| WAL bytes per (attempt|job) \|' "$log" | grep -oE '[0-9.]+ \|$' | cut -d' ' -f1)
	cpu=$(grep -E '^\| PostgreSQL CPU per (attempt|job) \|' "$log" | grep -oE '[0-9.]+ µs' | cut -d' ' -f1)
	awk -v side="$side" -v rate="$rate" -v t="$tput" -v p50="$(ms "${p% *}")" -v p99="$(ms "${p#* }")" -v n="$done" \
		-v cpu="${cpu:-0}" -v wal="${wal:-0}" -v st=$((s1 - s0)) -v drain="${drain:-0}" \
		-v f50="$( [ -n "$fin" ] && ms "${fin% *}" || echo 0)" -v f99="$( [ -n "$fin" ] && ms "${fin#* }" || echo 0)" 'BEGIN {
		printf "%s rate=%s throughput=%s p50_ms=%s p99_ms=%s completed=%s cpu_us_per_item=%.0f wal_bytes_per_item=%.0f statements_per_item=%.2f drain=%s finalized_p50_ms=%s finalized_p99_ms=%s\n",
			side, rate, t, p50, p99, n, cpu, wal, st / n, drain, f50, f99 }'
}

: >"$out"
for round in $(seq 1 "$ROUNDS"); do
	for rate in 0 $RATES; do
		for side in $SIDES; do
			line="round=$round $(run "$side" "$rate")"
			echo "$line" | tee -a "$out"
		done
	done
done

# Medians per (rate, side), and each side's ratio to River's median.
awk '
function field(name,   i, kv) { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } }
function median(list,   n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	side = $2; rate = field("rate"); key = rate SUBSEP side
	sides[side] = 1; rates[rate] = 1
	for (m = 1; m <= 9; m++) { name = names[m]; v[key, name] = v[key, name] " " field(name) }
}
BEGIN { split("throughput p99_ms p50_ms cpu_us_per_item wal_bytes_per_item statements_per_item drain finalized_p50_ms finalized_p99_ms", names, " ") }
END {
	printf "| load | side | throughput /s | drain /s | p50 ms committed | p99 ms committed | River finalized_at p50 / p99 ms | PG CPU µs / item | WAL bytes / item | statements / item | throughput vs River | p99 vs River | throughput vs floor | drain vs floor | p99 vs floor |\n"
	printf "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
	n = 0
	for (r in rates) rs[++n] = r
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (rs[j] + 0 < rs[i] + 0) { t = rs[i]; rs[i] = rs[j]; rs[j] = t }
	for (i = 1; i <= n; i++) {
		rate = rs[i]
		rt = median(v[rate, "river", "throughput"]); rp = median(v[rate, "river", "p99_ms"])
		ft = median(v[rate, "floor", "throughput"]); fp = median(v[rate, "floor", "p99_ms"]); fd = median(v[rate, "floor", "drain"])
		for (side in sides) {
			t = median(v[rate, side, "throughput"]); p99 = median(v[rate, side, "p99_ms"]); d = median(v[rate, side, "drain"])
			fin = (side == "river" ? sprintf("%.0f / %.0f", median(v[rate, side, "finalized_p50_ms"]), median(v[rate, side, "finalized_p99_ms"])) : "")
			printf "| %s | %s | %.0f | %.0f | %.0f | %.0f | %s | %.0f | %.0f | %.2f | %s | %s | %s | %s | %s |\n", (rate == 0 ? "unpaced" : rate "/s"), side, t,
				d, median(v[rate, side, "p50_ms"]), p99, fin, median(v[rate, side, "cpu_us_per_item"]),
				median(v[rate, side, "wal_bytes_per_item"]), median(v[rate, side, "statements_per_item"]),
				(rt > 0 ? sprintf("%.2f×", t / rt) : "-"), (rp > 0 ? sprintf("%.2f×", p99 / rp) : "-"),
				(ft > 0 ? sprintf("%.2f×", t / ft) : "-"), (fd > 0 && d > 0 ? sprintf("%.2f×", d / fd) : "-"), (fp > 0 ? sprintf("%.2f×", p99 / fp) : "-")
		}
	}
}' "$out" | tee "$out.md"
