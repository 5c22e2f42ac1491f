#!/bin/sh
# Runs the whole test suite with the race detector against a real Postgres:
# TEST_DATABASE_URL or DATABASE_URL when set (it needs wal_level=logical),
# otherwise a throwaway cluster from pg_virtualenv that is dropped afterwards.
# Extra arguments go to `go test` (e.g. scripts/test.sh -run TestRelay ./producer/relay/).
set -eu

[ $# -gt 0 ] || set -- ./...
# HOOKD_RACE=off drops the race detector: for benchmarks (make bench-micro),
# whose figures mean nothing under it (it multiplies CPU time 4-5 times).
race=-race
if [ "${HOOKD_RACE:-on}" = off ]; then race=; fi
gotest="go test $race -count=1 -timeout 12m"
if [ -n "${TEST_DATABASE_URL:-}${DATABASE_URL:-}" ]; then
	exec $gotest "$@"
fi
command -v pg_virtualenv >/dev/null 2>&1 || {
	echo "hookd: pg_virtualenv not found: run scripts/ensure-deps.sh as root, or set TEST_DATABASE_URL to a Postgres with wal_level=logical" >&2
	exit 2
}
# -t keeps the cluster in a temp dir, so two runs never collide.
exec pg_virtualenv -t \
	-o wal_level=logical -o max_replication_slots=64 -o max_wal_senders=64 \
	-o max_connections=400 -o fsync=off \
	-o log_min_messages=warning -o log_checkpoints=off -o log_min_error_statement=panic \
	-- $gotest "$@"
