#!/bin/sh
# Rebuilds third_party/go-fuse from the module the Go module proxy serves
# plus go-fuse-patches/*.patch in order, and diffs it against the tree:
# the vendored copy must hold exactly that, nothing edited by hand.
set -eu
cd "$(dirname "$0")"
here=$(pwd)
version=$(sed -n 's/^Base: go-fuse \(v[0-9.]*\).*/\1/p' README.md)
[ -n "$version" ] || { echo "check.sh: no 'Base: go-fuse vX.Y.Z' line in README.md" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Outside any module, so that no go.sum is touched.
src=$(cd "$tmp" && GOFLAGS= go mod download -json "github.com/hanwen/go-fuse/v2@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "check.sh: go-fuse $version not downloaded" >&2; exit 1; }
cp -r "$src" "$tmp/go-fuse"
chmod -R u+w "$tmp/go-fuse"
for p in go-fuse-patches/*.patch; do
	(cd "$tmp/go-fuse" && git apply --whitespace=nowarn "$here/$p") || { echo "check.sh: $p does not apply to go-fuse $version" >&2; exit 1; }
done
if ! diff -r "$tmp/go-fuse" go-fuse; then
	echo "check.sh: third_party/go-fuse differs from go-fuse $version plus the patches" >&2
	exit 1
fi
echo "third_party/go-fuse is go-fuse $version plus $(ls go-fuse-patches/*.patch | wc -l) patch(es)"
