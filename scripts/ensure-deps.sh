#!/bin/sh
# Installs what hookd's tests and `make run` need on a fresh Debian machine:
# PostgreSQL (server, pg_virtualenv) and kcat, which are required; Chromium,
# which the delivery portal's browser tests drive (required when root: those
# tests fail without it as root, and are skipped, saying why, otherwise);
# promtool (package prometheus) and kubectl, which let the deploy tests check
# the alert rules and render the manifests (those checks are skipped, saying
# why, when the tools cannot be installed). Does nothing when everything is
# present; explains what to install when it cannot (not root).
set -eu

missing=""
command -v pg_virtualenv >/dev/null 2>&1 || missing="$missing postgresql"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || case "$missing" in *postgresql*) ;; *) missing="$missing postgresql" ;; esac
command -v kcat >/dev/null 2>&1 || missing="$missing kcat"
# Chromium is required only where it can be installed (root).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then missing="$missing chromium"; fi
optional=""
command -v promtool >/dev/null 2>&1 || optional="$optional prometheus"
command -v kubectl >/dev/null 2>&1 || optional="$optional kubectl"
[ -z "$missing$optional" ] && exit 0

export DEBIAN_FRONTEND=noninteractive
install() {
	# shellcheck disable=SC2086
	apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 || {
		apt-get update -q >/dev/null 2>&1 || true
		apt-get install -y -q --no-install-recommends "$@" >/dev/null
	}
}

if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "hookd: missing Debian packages:$missing; install them (sudo apt-get install$missing) or set DATABASE_URL to a Postgres with wal_level=logical" >&2
		exit 2
	fi
	echo "installing:$missing" >&2
	# shellcheck disable=SC2086
	install $missing
fi
if [ -n "$optional" ] && [ "$(id -u)" = 0 ]; then
	for pkg in $optional; do
		echo "installing (optional): $pkg" >&2
		install "$pkg" 2>/dev/null || echo "hookd: could not install $pkg; the tests that need it will say they were skipped" >&2
		# Only its promtool is wanted: do not leave a Prometheus server running.
		[ "$pkg" = prometheus ] && { service prometheus stop >/dev/null 2>&1 || true; }
	done
fi
exit 0
