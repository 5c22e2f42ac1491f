#!/bin/sh
# Starts (or reuses) a local PostgreSQL for `make run` under .tmp/pg, with
# wal_level=logical, listening on 127.0.0.1:${HOOKD_DEV_PGPORT:-5434} with
# trust authentication for local use only. Prints the DATABASE_URL on stdout.
# `make devdb-stop` stops it; `rm -rf .tmp/pg` forgets it.
set -eu

port=${HOOKD_DEV_PGPORT:-5434}
dir=$(pwd)/.tmp/pg
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$bin" ] || { echo "hookd: no PostgreSQL server found (run scripts/ensure-deps.sh as root, or set DATABASE_URL)" >&2; exit 2; }

# The server refuses to run as root: run it as the postgres user then.
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

if [ ! -f "$dir/PG_VERSION" ]; then
	mkdir -p "$dir"
	[ "$(id -u)" = 0 ] && chown postgres "$dir"
	as_pg "$bin/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 >/dev/null
	cat >>"$dir/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
CONF
fi
if ! as_pg "$bin/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
	as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 30 start >/dev/null || {
		echo "hookd: the local Postgres did not start; see $dir/server.log" >&2
		exit 2
	}
fi
echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
