#!/usr/bin/env bash
# Repository hygiene, for CI and `make check-tree`:
#   (a) no tracked file over 1 MiB, but images under docs/ (a build output
#       committed by accident, like bench/river/river once was);
#   (b) every tracked path is one the Go module zip format accepts (no
#       module could be fetched otherwise; tools/releasecheck names each
#       refused path and why: a Windows reserved name like "nul", a
#       character outside the allowed set, paths equal but for case);
#   (c) with --clean, the work tree is unmodified and has no untracked,
#       unignored file: a build or test run that leaves the tree dirty
#       (go.work.sum, a generated file, a binary) fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fail=0

big=$(git ls-files -z | xargs -0 -r stat -c '%s %n' |
	awk '$1 > 1048576 && $2 !~ /^docs\/.*\.(png|svg|jpg|jpeg|gif|webp)$/ {printf "  %s (%.1f MiB)\n", $2, $1 / 1048576}')
if [ -n "$big" ]; then
	echo "check-tree: tracked files over 1 MiB (build outputs? only images under docs/ may be that large):" >&2
	echo "$big" >&2
	fail=1
else
	echo "check-tree: no tracked file over 1 MiB outside docs images"
fi

if ! (cd tools && GOWORK=off go run ./releasecheck paths -repo ..); then
	fail=1
fi

if [ "${1:-}" = "--clean" ]; then
	dirty=$(git status --porcelain)
	if [ -n "$dirty" ]; then
		echo "check-tree: the work tree was left modified (commit the file, or ignore a build output):" >&2
		echo "$dirty" | sed 's/^/  /' >&2
		git diff --stat >&2 || true
		fail=1
	else
		echo "check-tree: the work tree is clean"
	fi
fi
exit "$fail"
