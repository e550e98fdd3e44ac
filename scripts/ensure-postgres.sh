#!/usr/bin/env bash
# ensure-postgres.sh — make sure the PostgreSQL server binaries (initdb, pg_ctl,
# postgres) that onceplan's embedded cluster and tests need are installed.
#
# Looks where internal/pgcluster looks: $ONCEPLAN_PG_BINDIR, PATH, `pg_config
# --bindir`, the highest /usr/lib/postgresql/*/bin. If they are missing and this runs as
# root (or sudo works without a password), installs Debian's `postgresql` package; its
# postinst may start a system cluster, which is harmless: onceplan never uses it. As
# root, also makes sure the account PostgreSQL runs as exists ($ONCEPLAN_PG_USER, else
# "postgres"). Prints one line naming the bin directory on success; exits 1 otherwise.
set -euo pipefail

has_server() {
	[ -n "$1" ] && [ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ] && [ -x "$1/postgres" ]
}

find_bindir() {
	local p d
	if [ -n "${ONCEPLAN_PG_BINDIR:-}" ]; then
		has_server "$ONCEPLAN_PG_BINDIR" && { echo "$ONCEPLAN_PG_BINDIR"; return 0; }
		return 1
	fi
	if p=$(command -v pg_ctl 2>/dev/null); then
		d=$(dirname "$(readlink -f "$p")")
		has_server "$d" && { echo "$d"; return 0; }
		d=$(dirname "$p")
		has_server "$d" && { echo "$d"; return 0; }
	fi
	if command -v pg_config >/dev/null 2>&1 && d=$(pg_config --bindir 2>/dev/null); then
		has_server "$d" && { echo "$d"; return 0; }
	fi
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5 -V -r); do
		has_server "$d" && { echo "$d"; return 0; }
	done
	return 1
}

SUDO=()
can_install=false
if [ "$(id -u)" -eq 0 ]; then
	can_install=true
elif command -v sudo >/dev/null 2>&1 && sudo -n true </dev/null >/dev/null 2>&1; then
	SUDO=(sudo -n)
	can_install=true
fi
command -v apt-get >/dev/null 2>&1 || can_install=false

if ! bindir=$(find_bindir); then
	if [ -n "${ONCEPLAN_PG_BINDIR:-}" ]; then
		echo "ensure-postgres: ONCEPLAN_PG_BINDIR=$ONCEPLAN_PG_BINDIR does not hold initdb, pg_ctl and postgres; point it at the PostgreSQL server bin directory or unset it" >&2
		exit 1
	fi
	if [ "$can_install" != true ]; then
		echo "ensure-postgres: PostgreSQL server binaries (initdb, pg_ctl, postgres) are not installed; install them, e.g. \`sudo apt-get install postgresql\` on Debian/Ubuntu, or set ONCEPLAN_PG_BINDIR to their directory" >&2
		exit 1
	fi
	log=$(mktemp)
	trap 'rm -f "$log"' EXIT
	if ! { ${SUDO[@]+"${SUDO[@]}"} apt-get update -q &&
		${SUDO[@]+"${SUDO[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql; } </dev/null >"$log" 2>&1; then
		cat "$log" >&2
		echo "ensure-postgres: installing the postgresql package failed (output above); install it yourself: sudo apt-get install postgresql" >&2
		exit 1
	fi
	if ! bindir=$(find_bindir); then
		echo "ensure-postgres: the postgresql package is installed but initdb, pg_ctl and postgres are still not found; set ONCEPLAN_PG_BINDIR to their directory" >&2
		exit 1
	fi
fi

# PostgreSQL refuses to run as root; onceplan, when root, runs it as this account.
if [ "$(id -u)" -eq 0 ]; then
	account=${ONCEPLAN_PG_USER:-postgres}
	if ! getent passwd "$account" >/dev/null; then
		if command -v adduser >/dev/null 2>&1; then
			adduser --system --group --quiet --home /var/lib/postgresql --no-create-home "$account" </dev/null >/dev/null
		else
			useradd --system --user-group --home-dir /var/lib/postgresql --no-create-home --shell /usr/sbin/nologin "$account"
		fi
	fi
fi

echo "PostgreSQL server binaries: $bindir"
