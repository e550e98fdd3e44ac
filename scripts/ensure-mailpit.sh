#!/usr/bin/env bash
# ensure-mailpit.sh — make sure Mailpit v1.33.1 is installed for the bench's
# "mailpit" scenario (internal/tools/bench, make bench).
#
# Looks at $ONCEPLAN_MAILPIT, then at the copy this script installs, in
# ${XDG_CACHE_HOME:-$HOME/.cache}/onceplan/mailpit-v1.33.1/ (another
# directory with $ONCEPLAN_MAILPIT_DIR). A binary counts only when
# `go version -m` says it was built from github.com/axllent/mailpit v1.33.1
# (a binary built by `go install` reports "dev" to `mailpit version`). When
# there is none, builds it with `go install github.com/axllent/mailpit@v1.33.1`
# (only the Go module proxy needs to be reachable; about a minute on two
# cores). Prints the binary's path alone on stdout on success; exits 1 with
# one sentence on stderr (and go's output) otherwise.
set -euo pipefail

version=v1.33.1
module=github.com/axllent/mailpit

# is_wanted BIN: BIN is an executable built from $module at $version.
is_wanted() {
	[ -x "$1" ] && go version -m "$1" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+$module[[:space:]]+$version([[:space:]]|\$)"
}

if [ -n "${ONCEPLAN_MAILPIT:-}" ]; then
	if is_wanted "$ONCEPLAN_MAILPIT"; then
		echo "$ONCEPLAN_MAILPIT"
		exit 0
	fi
	echo "ensure-mailpit: ONCEPLAN_MAILPIT=$ONCEPLAN_MAILPIT is not a mailpit $version binary built with Go (go version -m); unset it to have one installed" >&2
	exit 1
fi

if ! command -v go >/dev/null 2>&1; then
	echo "ensure-mailpit: go is not on PATH; it is needed to install mailpit $version" >&2
	exit 1
fi

cache=${XDG_CACHE_HOME:-}
if [ -z "$cache" ]; then
	if [ -n "${HOME:-}" ]; then
		cache=$HOME/.cache
	else
		gopath=$(go env GOPATH | cut -d: -f1)
		cache=${gopath:-${TMPDIR:-/tmp}}/cache
	fi
fi
dir=${ONCEPLAN_MAILPIT_DIR:-$cache/onceplan/mailpit-$version}
bin=$dir/mailpit
if is_wanted "$bin"; then
	echo "$bin"
	exit 0
fi

mkdir -p "$dir"
# Installed into a scratch directory beside the final one and renamed into
# place, so that two runs at once, or one interrupted, never leave half a
# binary at $bin.
tmp=$(mktemp -d "$dir/.install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Outside any module or workspace, so that neither this repository's go.mod
# nor a go.work of the caller's takes part; -mod and friends in GOFLAGS would
# be refused by `go install pkg@version`.
if ! (cd "$tmp" && env GOBIN="$tmp" GOWORK=off GOFLAGS= go install "$module@$version") >"$tmp/log" 2>&1; then
	cat "$tmp/log" >&2
	echo "ensure-mailpit: \`go install $module@$version\` failed (output above)" >&2
	exit 1
fi
mv -f "$tmp/mailpit" "$bin"
if ! is_wanted "$bin"; then
	echo "ensure-mailpit: $bin was installed but go version -m does not report $module $version" >&2
	exit 1
fi
echo "$bin"
