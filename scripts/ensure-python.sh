#!/usr/bin/env bash
# ensure-python.sh — make sure python3 (3.10 or newer) is installed for the
# Python client's suite (clients/python, run by clients/pythontest).
#
# If python3 is missing (or older than 3.10) and this runs as root (or sudo
# works without a password) on a system with apt-get, installs Debian's
# `python3` package. Prints python3's path alone on stdout on success; exits 1
# with one sentence on stderr otherwise.
set -euo pipefail

recent() {
	command -v python3 >/dev/null 2>&1 &&
		python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null
}

if recent; then
	command -v python3
	exit 0
fi

SUDO=()
can_install=false
if [ "$(id -u)" -eq 0 ]; then
	can_install=true
elif command -v sudo >/dev/null 2>&1 && sudo -n true </dev/null >/dev/null 2>&1; then
	SUDO=(sudo -n)
	can_install=true
fi
if ! $can_install || ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-python: python3 3.10 or newer is not installed; install it (e.g. \`sudo apt-get install python3\` on Debian)" >&2
	exit 1
fi
echo "ensure-python: installing Debian's python3 package" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { "${SUDO[@]}" apt-get update -qq >&2 && "${SUDO[@]}" apt-get install -y -qq python3 >&2; } </dev/null; then
	echo "ensure-python: installing the python3 package failed (output above); install it yourself: sudo apt-get install python3" >&2
	exit 1
fi
if ! recent; then
	echo "ensure-python: the python3 package is installed but python3 on PATH is older than 3.10; put a newer python3 first on PATH" >&2
	exit 1
fi
command -v python3
