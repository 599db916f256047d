#!/usr/bin/env bash
# A Debian kernel for qemu-system-x86_64, from the Debian mirror apt already
# uses, with apt state of its own (the machine's apt is left as it was):
#   5.10   Debian 11 (bullseye)  linux-image-5.10.*-amd64   (no cgroup.kill)
#   6.1    Debian 12 (bookworm)  linux-image-6.1.*-amd64    (memory.peak, cgroup.kill)
# The image is the vmlinuz of the package that linux-image-amd64 depends on,
# kept under <cache>/kernel-<version>-k<KERNEL_FIXTURE>/ (the cache of
# scripts/bullseye-rootfs.sh: PROCTREE_OLDHOSTS_CACHE, or .cache/oldhosts).
# scripts/bullseye-rootfs.sh takes its 5.10 image from here; scripts/vm.sh
# boots either one.
#
#   bash scripts/debian-kernel.sh 5.10|6.1               fetch (or reuse); prints the vmlinuz path
#   bash scripts/debian-kernel.sh 5.10|6.1 --print-path  only print the path it would use
#   bash scripts/debian-kernel.sh --mirror               print the Debian mirror it uses
#
# Needs apt-get, apt-cache and dpkg-deb; not root. A few seconds, 8 MB.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Bump when the recipe below changes: the key names a new folder.
KERNEL_FIXTURE=1
cache="${PROCTREE_OLDHOSTS_CACHE:-$root/.cache/oldhosts}"
log() { echo "debian-kernel: $*" >&2; }

# The Debian mirror apt already uses: the first URIs/deb line for /debian
# (not the security archive). PROCTREE_DEBIAN_MIRROR overrides it.
debian_mirror() {
  local mirror="${PROCTREE_DEBIAN_MIRROR:-}"
  if [[ -z "$mirror" ]]; then
    mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ && $2 ~ /\/debian\/?$/ { print $2; exit }')"
  fi
  if [[ -z "$mirror" ]]; then
    mirror="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian\/?$/) { print $i; exit } }')"
  fi
  [[ -n "$mirror" ]] || { log "no Debian mirror found in apt's sources; set PROCTREE_DEBIAN_MIRROR"; return 1; }
  echo "$mirror"
}

if [[ "${1:-}" == "--mirror" ]]; then
  debian_mirror
  exit
fi

version="${1:-}"
case "$version" in
  5.10) suite=bullseye ;;
  6.1) suite=bookworm ;;
  *) log "usage: debian-kernel.sh 5.10|6.1 [--print-path] (got '${version}')"; exit 2 ;;
esac
dir="$cache/kernel-$version-k$KERNEL_FIXTURE"

if [[ "${2:-}" == "--print-path" ]]; then
  echo "$dir/vmlinuz"
  exit 0
fi
if [[ -f "$dir/complete" ]]; then
  echo "$dir/vmlinuz"
  exit 0
fi
for cmd in apt-get apt-cache dpkg-deb; do
  command -v "$cmd" >/dev/null || { log "$cmd is missing"; exit 1; }
done
mirror="$(debian_mirror)"

mkdir -p "$cache"
exec 9>"$cache/.kernel-$version.lock"
flock 9
if [[ -f "$dir/complete" ]]; then
  echo "$dir/vmlinuz"
  exit 0
fi

log "linux-image-amd64 from $suite ($mirror)"
work="$dir.partial"
rm -rf "$work"
apt="$work/apt"
mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/parts"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
echo "deb [signed-by=$keyring] $mirror $suite main" >"$apt/sources.list"
: >"$apt/status"
apt_b=(-o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts="$apt/parts"
  -o Dir::State::Lists="$apt/lists" -o Dir::State::Status="$apt/status"
  -o Dir::Cache="$apt" -o Dir::Cache::Archives="$apt/archives"
  -o APT::Architecture=amd64 -o APT::Architectures::=amd64
  -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
apt-get "${apt_b[@]}" update -qq
kpkg="$(apt-cache "${apt_b[@]}" depends linux-image-amd64 |
  awk -v v="$version" '$1 ~ /Depends:/ && index($2, "linux-image-" v ".") == 1 { print $2; exit }')"
[[ -n "$kpkg" ]] || { log "no linux-image-$version package behind linux-image-amd64 in $suite"; exit 1; }
(cd "$apt" && apt-get "${apt_b[@]}" download "$kpkg" >/dev/null)
mkdir -p "$work/kernel"
dpkg-deb --fsys-tarfile "$apt"/"$kpkg"_*.deb | tar -x -C "$work/kernel" ./boot
cp "$work/kernel"/boot/vmlinuz-* "$work/vmlinuz"
kernel_version="$(basename "$work"/kernel/boot/vmlinuz-* | sed 's/^vmlinuz-//')"
rm -rf "$work/kernel" "$apt"
echo "kernel $kernel_version ($kpkg) mirror $mirror" >"$work/complete"
rm -rf "$dir"
mv "$work" "$dir"
log "$(cat "$dir/complete")"
echo "$dir/vmlinuz"
