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
	# -p wins over the port written into postgresql.conf at initdb time, so a
	# changed HOOKD_DEV_PGPORT takes effect at the next start.
	as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -o "-p $port" -w -t 30 start >/dev/null || {
		echo "hookd: the local Postgres did not start on port $port; see $dir/server.log" >&2
		exit 2
	}
fi
# The port the server really listens on (line 4 of postmaster.pid), which
# differs from HOOKD_DEV_PGPORT when it was already running on another one.
running=$(sed -n 4p "$dir/postmaster.pid")
if [ "$running" != "$port" ]; then
	echo "hookd: the local Postgres already runs on port $running (make devdb-stop, then HOOKD_DEV_PGPORT=$port make run, to move it)" >&2
fi
echo "postgres://postgres@127.0.0.1:$running/postgres?sslmode=disable"
