#!/usr/bin/env bash
# make fuzz: runs every Fuzz* target of the repository, found by
# `go test -list`, for FUZZTIME each (default 30s), one after another. Run
# it under withpg (as make fuzz does) so that the packages whose fuzz
# targets need PostgreSQL share one throw-away cluster. A failing input is
# saved by go test under the package's testdata/fuzz/<target>/: fix the
# code, and keep the file, so that plain `go test` replays it.
set -euo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}

# `go test -list` prints a package's matching names, then "ok  <package> …"
# ("?  <package> [no test files]" for one without tests). Read whole first,
# so that a package that does not build stops the run (set -e).
list=$("$GO" test -list '^Fuzz' ./...)
targets=()
names=()
while IFS= read -r line; do
	case "$line" in
	Fuzz*) names+=("$line") ;;
	ok*)
		pkg=$(awk '{print $2}' <<<"$line")
		for n in "${names[@]}"; do targets+=("$pkg $n"); done
		names=()
		;;
	*) names=() ;;
	esac
done <<<"$list"

if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz: no Fuzz* target found" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${FUZZTIME} each"
failed=()
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "== $pkg $name"
	if ! "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"; then
		failed+=("$pkg $name")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "fuzz: every target ran ${FUZZTIME} without a failure"
