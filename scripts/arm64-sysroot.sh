#!/usr/bin/env bash
# Sets up what test/arm64.test.ts needs to run the arm64 prebuild on an x86-64
# Debian 12 machine: qemu-aarch64-static, and Debian's arm64 Node (v18, N-API 9)
# unpacked into a sysroot under .cache/arm64-sysroot/ that
#   qemu-aarch64-static -L .cache/arm64-sysroot .cache/arm64-sysroot/usr/bin/node
# runs. Everything apt fetches for it stays under .cache/ (its own package
# lists, its own download cache): the machine's dpkg architectures and apt
# state are left as they were. Installing qemu-user-static needs root; the
# sysroot does not. A complete sysroot is reused.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$root/.cache/arm64-apt"
sysroot="$root/.cache/arm64-sysroot"

# Debian 12's arm64 Node and the libraries it links; the last three are the
# architecture-independent JavaScript that Debian's Node loads from
# /usr/share/nodejs (without them it aborts: "Cannot load externalized builtin").
packages=(nodejs libnode108 libc6 libstdc++6 libgcc-s1 libuv1 libssl3 libicu72 zlib1g
  libbrotli1 libc-ares2 libnghttp2-14 node-cjs-module-lexer node-acorn node-undici)

if ! command -v qemu-aarch64-static >/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "arm64-sysroot: qemu-aarch64-static is missing; install qemu-user-static" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends qemu-user-static ||
    { apt-get update && apt-get install -y --no-install-recommends qemu-user-static; }
fi

want="${packages[*]}"
if [[ -x "$sysroot/usr/bin/node" && -f "$sysroot/.packages" && "$(cat "$sysroot/.packages")" == "$want" ]]; then
  echo "arm64-sysroot: reusing $sysroot"
else
  rm -rf "$sysroot" "$cache"
  mkdir -p "$cache/lists/partial" "$cache/archives/partial" "$cache/debs" "$sysroot"
  # apt with arm64 as its only architecture and state of its own.
  apt_arm64=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
    -o Dir::State::Lists="$cache/lists" -o Dir::Cache="$cache"
    -o Dir::Cache::Archives="$cache/archives" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get "${apt_arm64[@]}" update -qq
  (cd "$cache/debs" && apt-get "${apt_arm64[@]}" download "${packages[@]}")
  for deb in "$cache/debs"/*.deb; do
    dpkg-deb -x "$deb" "$sysroot"
  done
  echo "$want" >"$sysroot/.packages"
  rm -rf "$cache"
fi

qemu-aarch64-static -L "$sysroot" "$sysroot/usr/bin/node" -e \
  'console.log(`arm64-sysroot: ${process.arch} node ${process.version}, N-API ${process.versions.napi}`)'
