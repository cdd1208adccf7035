#!/bin/bash
# Entrypoint of the locally built kfsdb-postgres:N images (see build.sh).
#
# It mimics the parts of the official postgres image's docker-entrypoint.sh that
# testcontainers-go's postgres module (and plain `docker run`) rely on:
#
#   POSTGRES_USER              superuser name (default: postgres)
#   POSTGRES_PASSWORD          superuser password (required unless
#                              POSTGRES_HOST_AUTH_METHOD=trust)
#   POSTGRES_DB                database created on first start (default: $POSTGRES_USER)
#   POSTGRES_INITDB_ARGS       extra initdb arguments (shell-quoted string)
#   POSTGRES_INITDB_WALDIR     optional separate WAL directory
#   POSTGRES_HOST_AUTH_METHOD  pg_hba method for remote hosts (default: scram-sha-256)
#   POSTGRES_{USER,PASSWORD,DB,INITDB_ARGS}_FILE  read the value from a file instead
#   PGDATA                     data directory (default: /var/lib/postgresql/data)
#
# First start with an empty $PGDATA: initdb, start a temporary server on the unix
# socket only, create $POSTGRES_DB, run /docker-entrypoint-initdb.d/*.{sh,sql,sql.gz},
# stop it, then exec the real server. So "database system is ready to accept
# connections" is logged twice on first start and once on later starts.
#
# `docker run IMAGE -c fsync=off` == `docker run IMAGE postgres -c fsync=off`;
# any other command (`docker run IMAGE bash`) is exec'd as-is.
set -Eeo pipefail
shopt -s nullglob

log() { printf '%s\n' "$*"; }
die() {
	printf 'docker-entrypoint.sh: error: %s\n' "$*" >&2
	exit 1
}

# file_env VAR [DEFAULT]: VAR or the contents of the file named by VAR_FILE.
file_env() {
	local var="$1" fileVar="${1}_FILE" def="${2:-}" val
	if [ -n "${!var:-}" ] && [ -n "${!fileVar:-}" ]; then
		die "both $var and $fileVar are set (but are exclusive)"
	fi
	val="$def"
	if [ -n "${!var:-}" ]; then
		val="${!var}"
	elif [ -n "${!fileVar:-}" ]; then
		val="$(<"${!fileVar}")"
	fi
	export "$var"="$val"
	unset "$fileVar"
}

# Options that only print something and exit: no initialisation wanted.
want_help() {
	local arg
	for arg; do
		case "$arg" in
		-'?' | --help | --describe-config | -V | --version | -C | -C*) return 0 ;;
		esac
	done
	return 1
}

psql_run() {
	# Unix socket (/var/run/postgresql) of the temporary server; local auth is trust.
	psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc "$@"
}

temp_server_start() {
	# "$@" = the server arguments without the leading "postgres", so that e.g.
	# `-c config_file=...` also applies to the temporary server.
	local args=("$@" -c listen_addresses= -p "${PGPORT:-5432}")
	PGUSER="${PGUSER:-$POSTGRES_USER}" \
		pg_ctl -D "$PGDATA" -o "$(printf '%q ' "${args[@]}")" -w start
}

temp_server_stop() {
	PGUSER="${PGUSER:-$POSTGRES_USER}" pg_ctl -D "$PGDATA" -m fast -w stop
}

init_database() {
	file_env POSTGRES_PASSWORD
	file_env POSTGRES_USER postgres
	file_env POSTGRES_DB "$POSTGRES_USER"
	file_env POSTGRES_INITDB_ARGS
	: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"

	if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
		cat >&2 <<-'EOM'
			Error: Database is uninitialized and superuser password is not specified.
			       You must specify POSTGRES_PASSWORD to a non-empty value for the
			       superuser. For example, "-e POSTGRES_PASSWORD=password" on "docker run".

			       You may also use "POSTGRES_HOST_AUTH_METHOD=trust" to allow all
			       connections without a password. This is *not* recommended.
		EOM
		exit 1
	fi

	# Interrupted during initialisation (we are PID 1 and would otherwise ignore
	# SIGTERM/SIGINT): stop the temporary server if it runs and give up.
	trap 'log "signal received during initialization; aborting"; pg_ctl -D "$PGDATA" -m immediate -w stop >/dev/null 2>&1 || :; exit 143' INT TERM

	local locale=C
	if [ -d /usr/lib/locale/C.utf8 ] || [ -d /usr/lib/locale/C.UTF-8 ]; then
		locale=C.UTF-8
	fi
	local initdb_args=(--username="$POSTGRES_USER" --encoding=UTF8 --locale="$locale")
	if [ -n "${POSTGRES_INITDB_WALDIR:-}" ]; then
		initdb_args+=(--waldir="$POSTGRES_INITDB_WALDIR")
	fi
	# POSTGRES_INITDB_ARGS comes last (initdb: last option wins) and is
	# shell-evaluated like in the official image, so quoting works. The password
	# goes through a pipe (process substitution), never a file or argv.
	if [ -n "$POSTGRES_PASSWORD" ]; then
		eval 'initdb "${initdb_args[@]}" --pwfile=<(printf "%s\n" "$POSTGRES_PASSWORD") '"$POSTGRES_INITDB_ARGS"
	else
		eval 'initdb "${initdb_args[@]}" '"$POSTGRES_INITDB_ARGS"
	fi

	printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >>"$PGDATA/pg_hba.conf"
	printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"

	# Lets psql use password auth should POSTGRES_INITDB_ARGS have disabled local trust.
	export PGPASSWORD="${PGPASSWORD:-$POSTGRES_PASSWORD}"
	temp_server_start "${@:2}"

	if [ "$POSTGRES_DB" != postgres ]; then
		local exists
		exists="$(psql_run --dbname postgres --set db="$POSTGRES_DB" --tuples-only --no-align <<-'EOSQL'
			SELECT 1 FROM pg_database WHERE datname = :'db';
		EOSQL
		)"
		if [ -z "$exists" ]; then
			psql_run --dbname postgres --set db="$POSTGRES_DB" <<-'EOSQL'
				CREATE DATABASE :"db";
			EOSQL
		fi
	fi

	local f
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh)
			if [ -x "$f" ]; then
				log "$0: running $f"
				"$f"
			else
				log "$0: sourcing $f"
				# shellcheck disable=SC1090
				. "$f"
			fi
			;;
		*.sql)
			log "$0: running $f"
			psql_run --dbname "$POSTGRES_DB" -f "$f"
			;;
		*.sql.gz)
			log "$0: running $f"
			gunzip -c "$f" | psql_run --dbname "$POSTGRES_DB"
			;;
		*) log "$0: ignoring $f" ;;
		esac
	done

	temp_server_stop
	unset PGPASSWORD
	trap - INT TERM
	log
	log 'PostgreSQL init process complete; ready for start up.'
	log
}

if [ "$#" -eq 0 ] || [ "${1:0:1}" = '-' ]; then
	set -- postgres "$@"
fi

# Anything but the server (bash, psql, ...): run it as-is.
if [ "$1" != postgres ] || want_help "$@"; then
	exec "$@"
fi

: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA

if [ "$(id -u)" = 0 ]; then
	# Prepare directories as root, then re-run this script as the postgres user.
	mkdir -p "$PGDATA" /var/run/postgresql
	chmod 00700 "$PGDATA" || :
	find "$PGDATA" \! -user postgres -exec chown postgres:postgres '{}' +
	chown postgres:postgres /var/run/postgresql
	chmod 03777 /var/run/postgresql
	if [ -n "${POSTGRES_INITDB_WALDIR:-}" ]; then
		mkdir -p "$POSTGRES_INITDB_WALDIR"
		find "$POSTGRES_INITDB_WALDIR" \! -user postgres -exec chown postgres:postgres '{}' +
		chmod 00700 "$POSTGRES_INITDB_WALDIR"
	fi
	export HOME=/var/lib/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups -- "${BASH_SOURCE[0]}" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	init_database "$@"
else
	log
	log 'PostgreSQL Database directory appears to contain a database; Skipping initialization'
	log
fi

# The server replaces this shell and becomes PID 1: `docker stop` (SIGINT, see
# STOPSIGNAL) triggers a fast shutdown, SIGTERM a smart one.
exec "$@"
