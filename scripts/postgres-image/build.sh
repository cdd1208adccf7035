#!/usr/bin/env bash
# Build a local PostgreSQL image from Debian packages, for machines whose Docker
# engine cannot pull from any registry (only Debian mirrors are reachable).
#
#   build.sh 17        -> kfsdb-postgres:17  (Debian trixie,   postgresql-17)
#   build.sh 15        -> kfsdb-postgres:15  (Debian bookworm, postgresql-15)
#   build.sh pgaf 17   -> kfsdb-pgaf:17      (the same, plus pg_auto_failover:
#   build.sh pgaf 15   -> kfsdb-pgaf:15       postgresql-N-auto-failover and
#                                             pg-auto-failover-cli, for tests/hacluster)
#
# If the tag already exists nothing is rebuilt. Must run as root (debootstrap).
# Environment:
#   KFSDB_DEBIAN_MIRROR  Debian mirror URL (default: the one host apt uses,
#                        falling back to http://deb.debian.org/debian)
#   TMPDIR               where the temporary rootfs goes (default: /var/tmp)
set -euo pipefail

prog=${0##*/}
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
entrypoint_src=$script_dir/docker-entrypoint.sh
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

msg() { printf '[%s] %s\n' "$prog" "$*"; }
die() {
	printf '[%s] ERROR: %s\n' "$prog" "$*" >&2
	exit 1
}
usage() {
	echo "usage: $prog [pgaf] 17|15" >&2
	exit 2
}

# The flavor only adds packages (and a check that they run) to the one rootfs:
# the pgaf image is kfsdb-postgres plus pg_auto_failover's keeper and monitor.
flavor=postgres
if [ "$#" -eq 2 ] && [ "$1" = pgaf ]; then
	flavor=pgaf
	shift
fi
[ "$#" -eq 1 ] || usage
version=$1
case "$version" in
17) suite=trixie ;;
15) suite=bookworm ;;
*) usage ;;
esac
tag=kfsdb-$flavor:$version
packages=postgresql-$version
if [ "$flavor" = pgaf ]; then
	# Debian: bookworm has pg_auto_failover 2.0, trixie 2.2.
	packages=$packages,postgresql-$version-auto-failover,pg-auto-failover-cli
fi
# The data directory, as in the official image (PGDATA and its VOLUME).
pgdata=/var/lib/postgresql/data

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "docker engine not reachable (is dockerd running? are you allowed to use it?)"

if docker image inspect "$tag" >/dev/null 2>&1; then
	echo "$tag present"
	exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap needs it)"
[ -r "$entrypoint_src" ] || die "missing $entrypoint_src"

t_start=$SECONDS
step_start=$SECONDS
step_done() {
	msg "$1 done in $((SECONDS - step_start))s"
	step_start=$SECONDS
}

# --- debootstrap on the host ----------------------------------------------
apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}
if ! command -v debootstrap >/dev/null 2>&1; then
	msg "installing debootstrap via apt-get"
	if ! apt_install debootstrap; then
		msg "apt-get install failed; running apt-get update and retrying"
		apt-get update -q || die "apt-get update failed"
		apt_install debootstrap || die "could not install debootstrap"
	fi
	step_done "installing debootstrap"
fi
[ -e "/usr/share/debootstrap/scripts/$suite" ] ||
	die "this debootstrap ($(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo '?')) does not know suite '$suite'"
[ -r "$keyring" ] || die "missing $keyring (apt-get install debian-archive-keyring)"

# --- mirror: the one the host's apt uses ----------------------------------
detect_mirror() {
	local m
	m=$(
		{
			# deb822 sources: "URIs: http://... [http://...]"
			cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
				awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }'
			# one-line sources: "deb [opts] URI suite components"
			cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
				sed -n 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]*\)\?\([^[:space:]]\+\).*/\2/p'
		} | grep -E '^https?://[^[:space:]]+/debian/?$' | head -n 1
	) || true
	printf '%s\n' "${m:-http://deb.debian.org/debian}"
}
mirror=${KFSDB_DEBIAN_MIRROR:-$(detect_mirror)}
mirror=${mirror%/}

# --- temporary rootfs (always removed) ------------------------------------
workdir=$(mktemp -d "${TMPDIR:-/var/tmp}/kfsdb-$flavor-$version.XXXXXX")
rootfs=$workdir/rootfs
log=$workdir/debootstrap.log
show_log=0
# Temporary tag of the raw `docker import` (no config yet), removed at exit.
import_tag=
cleanup() {
	local rc=$? mp
	if [ -n "$import_tag" ]; then
		docker rmi "$import_tag" >/dev/null 2>&1 || :
	fi
	if [ "$rc" -ne 0 ] && [ "$show_log" = 1 ] && [ -s "$log" ]; then
		echo "----- last lines of debootstrap log -----" >&2
		tail -n 40 "$log" >&2 || :
		echo "-----------------------------------------" >&2
	fi
	# debootstrap mounts proc/sys (and maybe more) inside the target and may leave
	# them behind on failure: unmount before deleting, deepest first.
	if [ -d "$rootfs" ]; then
		awk -v r="$rootfs" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts |
			sort -r | while read -r mp; do umount -l "$mp" 2>/dev/null || :; done
	fi
	rm -rf --one-file-system "$workdir" || msg "WARNING: could not remove $workdir"
	if [ "$rc" -ne 0 ]; then
		printf '[%s] FAILED building %s after %ss\n' "$prog" "$tag" "$((SECONDS - t_start))" >&2
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

msg "building $tag: ${packages//,/ } from Debian $suite ($mirror)"
msg "debootstrap into $rootfs (log: $log)"
show_log=1
if ! debootstrap --variant=minbase --components=main --keyring="$keyring" \
	--include="$packages" \
	"$suite" "$rootfs" "$mirror" >"$log" 2>&1; then
	die "debootstrap failed"
fi
show_log=0
step_done "debootstrap"

# --- trim and prepare the rootfs ------------------------------------------
in_root() { chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

bin=/usr/lib/postgresql/$version/bin
tools="$bin/postgres $bin/initdb $bin/pg_ctl $bin/psql"
if [ "$flavor" = pgaf ]; then
	# pg_autoctl runs pg_basebackup and pg_rewind when a node (re)joins.
	tools="$tools /usr/bin/pg_autoctl $bin/pg_basebackup $bin/pg_rewind"
fi
for f in $tools; do
	[ -x "$rootfs$f" ] || die "$f missing in rootfs"
done
# Tools the entrypoint and testcontainers' port wait strategy
# (`/bin/sh -c 'cat /proc/net/tcp* | awk ... | grep ...'`) need.
for tool in sh bash cat awk grep sed find setpriv id gunzip; do
	in_root sh -c "command -v $tool" >/dev/null 2>&1 || die "'$tool' missing in rootfs"
done
in_root id postgres >/dev/null || die "no postgres user in rootfs"

# The Debian package creates a "main" cluster on install; we use $PGDATA instead.
rm -rf "$rootfs/etc/postgresql/$version/main" "$rootfs/var/lib/postgresql/$version"
# LLVM JIT: libLLVM + libz3 + bitcode are ~180 MB, almost half the image, and
# are only dlopen()ed through llvmjit.so. Without llvmjit.so PostgreSQL simply
# runs without JIT ("if the provider cannot be loaded, JIT is not performed,
# no error is raised"), which is what a test database wants anyway.
# KFSDB_PG_KEEP_JIT=1 keeps it.
if [ "${KFSDB_PG_KEEP_JIT:-0}" != 1 ]; then
	rm -rf "$rootfs/usr/lib/postgresql/$version/lib/llvmjit.so" \
		"$rootfs/usr/lib/postgresql/$version/lib/llvmjit_types.bc" \
		"$rootfs/usr/lib/postgresql/$version/lib/bitcode"
	rm -f "$rootfs"/usr/lib/*-linux-gnu/libLLVM* "$rootfs"/usr/lib/*-linux-gnu/libz3.so*
fi
# apt caches, docs, man pages, translations, locale sources (nothing is
# localedef'd at runtime; C.UTF-8 is built into libc), logs.
in_root apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
	"$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old \
	"$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
	"$rootfs"/usr/share/locale/* "$rootfs"/usr/share/lintian/* "$rootfs"/usr/share/i18n \
	"$rootfs"/tmp/* "$rootfs"/var/tmp/*
find "$rootfs/var/log" -type f -exec truncate -s 0 '{}' +
# The engine provides hostname (and machine-id is per container anyway).
: >"$rootfs/etc/hostname"
rm -f "$rootfs/etc/machine-id" && : >"$rootfs/etc/machine-id"

install -m 0755 "$entrypoint_src" "$rootfs/usr/local/bin/docker-entrypoint.sh"
install -d -m 0755 "$rootfs/docker-entrypoint-initdb.d"
# /var/run is an absolute symlink to /run: use the real path, never the host's.
install -d -m 03777 -o "$(in_root id -u postgres)" -g "$(in_root id -g postgres)" "$rootfs/run/postgresql"
install -d -m 0700 -o "$(in_root id -u postgres)" -g "$(in_root id -g postgres)" "$rootfs/var/lib/postgresql/data"

# Also proves that every shared library they need is still there after trimming.
for f in $tools; do
	in_root "$f" --version >/dev/null || die "$f does not run inside the trimmed rootfs"
done
pg_full_version=$(in_root "$bin/postgres" --version)
msg "rootfs: $pg_full_version, $(du -sh --one-file-system "$rootfs" | cut -f1)"
step_done "trimming rootfs"

# --- import ----------------------------------------------------------------
# `docker import --change` sets the whole configuration except STOPSIGNAL, which
# this engine rejects there (20.10: "stopsignal is not a valid change command").
# So the import gets a temporary tag and a one-instruction Dockerfile build on
# top of it adds STOPSIGNAL (metadata only: no new layer, and no registry needed
# because FROM is local).
import_tag=kfsdb-$flavor-rootfs:$version-tmp$$
msg "importing rootfs into docker (temporary tag $import_tag)"
tar --numeric-owner -C "$rootfs" -c . |
	docker import \
		--message "$pg_full_version, Debian $suite" \
		--change "LABEL org.opencontainers.image.title=kfsdb-$flavor org.opencontainers.image.description=\"$pg_full_version on Debian $suite, built locally by scripts/postgres-image/build.sh\"" \
		--change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
		--change 'CMD ["postgres"]' \
		--change "ENV PATH=/usr/local/sbin:/usr/local/bin:$bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		--change "ENV PGDATA=$pgdata" \
		--change 'ENV LANG=C.UTF-8' \
		--change 'EXPOSE 5432' \
		--change 'USER root' \
		- "$import_tag" >/dev/null
step_done "docker import"

# VOLUME as in the official image: without it the data directory is on the
# container's storage driver, here fuse-overlayfs, where every WAL write and
# fsync goes through a FUSE daemon (pg_test_fsync: fdatasync 454 us there,
# 98 us on a volume). A container given a tmpfs or a mount there gets no
# anonymous volume; `docker rm -v` removes one it got.
msg "adding STOPSIGNAL SIGINT and VOLUME $pgdata, tagging $tag"
printf 'FROM %s\nSTOPSIGNAL SIGINT\nVOLUME %s\n' "$import_tag" "$pgdata" >"$workdir/Dockerfile"
mkdir "$workdir/context" # empty build context
# Legacy builder on purpose: buildx is usually not installed on these machines.
if ! build_out=$(DOCKER_BUILDKIT=0 docker build --force-rm -t "$tag" \
	-f "$workdir/Dockerfile" "$workdir/context" 2>&1); then
	printf '%s\n' "$build_out" >&2
	die "docker build failed"
fi
docker image inspect "$tag" >/dev/null 2>&1 || die "docker build finished but $tag does not exist"
[ "$(docker image inspect -f '{{.Config.StopSignal}}' "$tag")" = SIGINT ] ||
	die "$tag has no STOPSIGNAL SIGINT"
docker image inspect -f '{{json .Config.Volumes}}' "$tag" | grep -qF "\"$pgdata\"" ||
	die "$tag has no VOLUME $pgdata"
step_done "docker build (STOPSIGNAL, VOLUME)"

size=$(docker image inspect -f '{{.Size}}' "$tag")
msg "built $tag ($((size / 1024 / 1024)) MiB) in $((SECONDS - t_start))s"
