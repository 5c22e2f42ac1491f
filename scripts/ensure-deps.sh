#!/bin/sh
# Installs what hookd's tests and `make run` need on a fresh Debian machine:
# PostgreSQL (server, pg_virtualenv) and kcat. Does nothing when they are
# present; explains what to install when it cannot (not root).
set -eu

missing=""
command -v pg_virtualenv >/dev/null 2>&1 || missing="$missing postgresql"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || case "$missing" in *postgresql*) ;; *) missing="$missing postgresql" ;; esac
command -v kcat >/dev/null 2>&1 || missing="$missing kcat"
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "hookd: missing Debian packages:$missing; install them (sudo apt-get install$missing) or set DATABASE_URL to a Postgres with wal_level=logical" >&2
	exit 2
fi
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 || {
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends $missing >/dev/null
}
