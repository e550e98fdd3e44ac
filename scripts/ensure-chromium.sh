#!/usr/bin/env bash
# ensure-chromium.sh — make sure a headless-capable Chromium is installed for the
# browser end-to-end test (cmd/onceplan, TestBrowser…).
#
# Looks at $ONCEPLAN_CHROME, then chromium, chromium-browser, google-chrome(-stable) on
# PATH. If none is found and this runs as root (or sudo works without a password) on a
# system with apt-get, installs Debian's `chromium` package. Prints the browser's path
# alone on stdout on success; exits 1 with one sentence on stderr otherwise.
set -euo pipefail

find_chrome() {
	local c
	if [ -n "${ONCEPLAN_CHROME:-}" ]; then
		[ -x "$ONCEPLAN_CHROME" ] && { echo "$ONCEPLAN_CHROME"; return 0; }
		return 1
	fi
	for c in chromium chromium-browser google-chrome google-chrome-stable; do
		if command -v "$c" >/dev/null 2>&1; then
			command -v "$c"
			return 0
		fi
	done
	return 1
}

if chrome=$(find_chrome); then
	echo "$chrome"
	exit 0
fi
if [ -n "${ONCEPLAN_CHROME:-}" ]; then
	echo "ensure-chromium: ONCEPLAN_CHROME=$ONCEPLAN_CHROME is not an executable; point it at chromium or unset it" >&2
	exit 1
fi

SUDO=()
can_install=false
if [ "$(id -u)" -eq 0 ]; then
	can_install=true
elif command -v sudo >/dev/null 2>&1 && sudo -n true </dev/null >/dev/null 2>&1; then
	SUDO=(sudo -n)
	can_install=true
fi
command -v apt-get >/dev/null 2>&1 || can_install=false
if [ "$can_install" != true ]; then
	echo "ensure-chromium: Chromium is not installed; install it (e.g. \`sudo apt-get install chromium\` on Debian) or set ONCEPLAN_CHROME to a Chrome or Chromium binary" >&2
	exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { ${SUDO[@]+"${SUDO[@]}"} apt-get update -q &&
	${SUDO[@]+"${SUDO[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core; } </dev/null >"$log" 2>&1; then
	cat "$log" >&2
	echo "ensure-chromium: installing the chromium package failed (output above); install it yourself: sudo apt-get install chromium" >&2
	exit 1
fi
if ! chrome=$(find_chrome); then
	echo "ensure-chromium: the chromium package is installed but no chromium binary is on PATH; set ONCEPLAN_CHROME to it" >&2
	exit 1
fi
echo "$chrome"
