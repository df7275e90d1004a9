#!/usr/bin/env bash
# Vendor MathJax 3 into book/_static/mathjax (git-ignored) from the npm
# registry, so the rendered book typesets equations with no internet.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=book/_static/mathjax
version=3.2.2
if [ -f "$dest/tex-chtml.js" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "mathjax@$version" >/dev/null)
tar xzf "$tmp/mathjax-$version.tgz" -C "$tmp"
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
cp -r "$tmp/package/es5" "$dest"
echo "$version" > "$dest/VERSION"
echo "vendored MathJax $version into $dest"
