#!/usr/bin/env bash
# Runs one command as root in a throwaway VM: Debian's own 5.10 or 6.1 kernel
# under qemu-system-x86_64 (TCG, no KVM needed; 15-80 s a boot), the Debian 11
# root filesystem of scripts/bullseye-rootfs.sh as its initramfs, pure cgroup
# v2 with the memory, pids and cpu controllers, and this worktree's package
# (`npm pack`, installed as a user would) at /opt/proctree-test/app.
#
#   scripts/vm.sh [--kernel 5.10|6.1] [--layout leaf|inner] [--timeout SECONDS]
#                 [--add HOST_PATH:GUEST_PATH]... -- COMMAND [ARGS...]
#
# COMMAND's stdout and stderr are this script's (each on a serial port of its
# own, so they stay apart; printed as they come), and its exit status is this
# script's. 124: the VM overran --timeout (default 900 s, or
# PROCTREE_VM_TIMEOUT) and was killed; 125: the VM could not be built or did
# not run COMMAND to its end (the console's tail says why). The VM is always
# stopped, by qemu's own pid, and has no network.
#
# In the guest, /init (bash, PID 1) mounts proc, sys, devtmpfs, devpts, tmpfs
# on /tmp and /dev/shm, and cgroup2 alone at /sys/fs/cgroup (no v1 hierarchy:
# cgroup_no_v1=all); moves itself into the leaf /sys/fs/cgroup/init; enables
# +memory +pids +cpu in the root's cgroup.subtree_control; makes
# /sys/fs/cgroup/harness; and runs COMMAND as root in /opt/proctree-test/app
# (NODE_PATH names its node_modules, so require('proctree') works anywhere)
# with stdin /dev/null, in a cgroup that --layout picks:
#   leaf   (default) harness/main. harness's subtree_control has +memory
#          +pids +cpu, so harness itself can hold no process (the "no
#          internal processes" rule): COMMAND is a harness that already moved
#          itself into a leaf, as a systemd service with Delegate=yes does,
#          and can make cgroups with limits beside it, in harness/.
#   inner  harness itself, with the controllers available there
#          (cgroup.controllers) but not enabled for its children: a harness
#          that wants limits below it must first move itself into a leaf.
# When COMMAND ends, whatever it left in harness/ is killed, and the VM
# powers off.
#
# --add copies a host file or folder (symlinks followed) into the guest at
# GUEST_PATH before it boots, e.g. a test binary.
#
# Cached under PROCTREE_OLDHOSTS_CACHE (or .cache/oldhosts), each under a key
# that changes with what goes in: the Debian 11 root filesystem and the
# kernels (scripts/bullseye-rootfs.sh and scripts/debian-kernel.sh build them
# if missing: root, about a minute), and the installed package (vm-app/<key>/,
# keyed by the packed tarball's hash and the root filesystem). A second call
# with the same package packs, then boots only. Needs root (the package is
# installed in a chroot), qemu-system-x86_64, cpio, unshare, node and npm.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Bump when the app recipe below changes: the key names a new folder.
APP_FIXTURE=1
cache="${PROCTREE_OLDHOSTS_CACHE:-$root/.cache/oldhosts}"

log() { echo "vm.sh: $*" >&2; }
die() { log "$*"; exit 125; }
usage() {
  echo "usage: scripts/vm.sh [--kernel 5.10|6.1] [--layout leaf|inner] [--timeout SECONDS] [--add HOST_PATH:GUEST_PATH]... -- COMMAND [ARGS...]" >&2
  exit 125
}

kernel=6.1
layout=leaf
timeout="${PROCTREE_VM_TIMEOUT:-900}"
memory_mb=1536
adds=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kernel) [[ $# -ge 2 ]] || usage; kernel="$2"; shift 2 ;;
    --layout) [[ $# -ge 2 ]] || usage; layout="$2"; shift 2 ;;
    --timeout) [[ $# -ge 2 ]] || usage; timeout="$2"; shift 2 ;;
    --add) [[ $# -ge 2 ]] || usage; adds+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
[[ $# -gt 0 ]] || usage
[[ "$kernel" == 5.10 || "$kernel" == 6.1 ]] || die "--kernel is 5.10 or 6.1, not $kernel"
[[ "$layout" == leaf || "$layout" == inner ]] || die "--layout is leaf or inner, not $layout"
[[ "$timeout" =~ ^[0-9]+$ && "$timeout" -gt 0 ]] || die "--timeout is a number of seconds, not $timeout"
for add in "${adds[@]}"; do
  [[ "$add" == *:/* ]] || die "--add takes HOST_PATH:GUEST_PATH (an absolute guest path), not $add"
  [[ -e "${add%%:*}" ]] || die "--add: ${add%%:*} does not exist"
done
for cmd in qemu-system-x86_64 cpio unshare chroot node npm; do
  command -v "$cmd" >/dev/null || die "$cmd is missing (apt-get install qemu-system-x86 cpio)"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/proctree-vm.XXXXXX")"
qemu_pid=
tail_pids=()
cleanup() {
  # Ours, by pid: the VM, then the readers of its output.
  if [[ -n "$qemu_pid" ]]; then kill -KILL "$qemu_pid" 2>/dev/null || true; fi
  for p in "${tail_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 125' INT TERM HUP

# --- what the VM is made of (built once, cached) ---------------------------
fixture="$(bash "$root/scripts/bullseye-rootfs.sh")" || die "no Debian 11 root filesystem (bash scripts/bullseye-rootfs.sh, as root)"
if [[ "$kernel" == 5.10 ]]; then
  vmlinuz="$fixture/vmlinuz"  # the fixture's copy of scripts/debian-kernel.sh 5.10
else
  vmlinuz="$(bash "$root/scripts/debian-kernel.sh" "$kernel")" || die "no $kernel kernel (bash scripts/debian-kernel.sh $kernel)"
fi

# The package as npm publishes it (dist/ and the x64 prebuild built first if missing).
if [[ ! -f "$root/dist/cjs/index.js" ]]; then (cd "$root" && node scripts/build-ts.js >&2) || die "build-ts failed"; fi
(cd "$root" && node scripts/prebuild.js --arch x64 --if-missing >&2) || die "prebuild failed"
tarball="$(cd "$root" && npm pack --ignore-scripts --silent --pack-destination "$work")" || die "npm pack failed"
tarball="$work/$(tail -n 1 <<<"$tarball")"
[[ -f "$tarball" ]] || die "npm pack made no $tarball"
key="$( (sha256sum <"$tarball"; cat "$fixture/complete"; echo "app $APP_FIXTURE") | sha256sum | cut -c1-16)"
app="$cache/vm-app/$key"

mkdir -p "$cache/vm-app"
# One install of a given package at a time (tests boot VMs in parallel);
# whoever comes second finds it made.
exec 8>"$cache/vm-app/.lock"
flock 8
if [[ ! -f "$app/app.cpio" ]]; then
  [[ $(id -u) -eq 0 ]] || die "installing the package in the Debian 11 chroot needs root"
  log "installing $(basename "$tarball") in the Debian 11 root filesystem"
  npm_cache="$(npm config get cache 2>/dev/null || true)"
  mkdir -p "$work/install/npm-cache" "$work/stage/opt/proctree-test"
  cp "$tarball" "$work/install/package.tgz"
  # The CA bundle the host's Node is told to trust (a TLS-inspecting proxy's),
  # for npm's fetches of the package's dependencies.
  extra_ca=
  if [[ -n "${NODE_EXTRA_CA_CERTS:-}" && -f "$NODE_EXTRA_CA_CERTS" ]]; then
    cp "$NODE_EXTRA_CA_CERTS" "$work/install/extra-ca.pem"
    extra_ca=NODE_EXTRA_CA_CERTS=/mnt/extra-ca.pem
  fi
  # In namespaces of its own: the mounts go with them, and so does anything
  # npm left running (the namespace's init is killed with unshare).
  timeout -s KILL 300 unshare --mount --propagation private --pid --fork --kill-child=SIGKILL sh -c '
    set -eu
    R="$1"; W="$2"; C="$3"; CA="$4"
    mount -t proc proc "$R/proc"
    mount --rbind /dev "$R/dev"
    mount --bind "$W" "$R/mnt"
    if [ -n "$C" ] && [ -d "$C" ]; then mount --bind "$C" "$R/mnt/npm-cache"; fi
    chroot "$R" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
      npm_config_cache=/mnt/npm-cache npm_config_update_notifier=false $CA /bin/sh -c "
        set -e; mkdir /mnt/app && cd /mnt/app && echo {\\\"name\\\":\\\"app\\\",\\\"private\\\":true} > package.json &&
        npm install /mnt/package.tgz --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error"
  ' vm-install "$fixture/rootfs" "$work/install" "$npm_cache" "$extra_ca" >&2 || die "npm install in the Debian 11 chroot failed"
  mv "$work/install/app" "$work/stage/opt/proctree-test/app"
  mkdir -p "$app"
  (cd "$work/stage" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$app/app.cpio.tmp"
  mv "$app/app.cpio.tmp" "$app/app.cpio"
  rm -rf "$work/install" "$work/stage"
fi
# Each change of the package makes a new install (4-5 MB): the four used last are kept.
touch "$app"
for old in $(cd "$cache/vm-app" && ls -1t | grep -E '^[0-9a-f]{16}$' | tail -n +5); do rm -rf "${cache:?}/vm-app/$old"; done
exec 8>&-

# --- this call: /init, COMMAND and the added files --------------------------
overlay="$work/overlay"
mkdir -p "$overlay/proctree-vm"
printf '%q ' "$@" >"$overlay/proctree-vm/argv"
echo "$layout" >"$overlay/proctree-vm/layout"
for add in "${adds[@]}"; do
  host="${add%%:*}"
  guest="${add#*:}"
  mkdir -p "$overlay$(dirname "$guest")"
  cp -rL "$host" "$overlay$guest"
done
cat >"$overlay/init" <<'INIT'
#!/bin/bash
# PID 1 of the VM (scripts/vm.sh). Stays init: it reaps the orphans that
# reparent to it, and powers off when COMMAND is done.
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root LANG=C.UTF-8
export NODE_PATH=/opt/proctree-test/app/node_modules
halt() {
  echo "PROCTREE-VM-EXIT $1 $(cut -d' ' -f1 /proc/uptime)"
  # The kernel prints its power-off lines straight to the console, past the
  # tty that may still be sending this one (seen cut in two by them, which
  # lost the status): a moment for it to go out first.
  sleep 1
  echo o >/proc/sysrq-trigger
  sleep 5
  echo b >/proc/sysrq-trigger
}
setup() { "$@" || { echo "PROCTREE-VM-SETUP-FAILED: $*"; halt 125; }; }
setup mount -t proc proc /proc
setup mount -t sysfs sysfs /sys
setup mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
setup mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
ln -sf pts/ptmx /dev/ptmx
setup mount -t tmpfs tmpfs /dev/shm
setup mount -t tmpfs tmpfs /tmp
setup mount -t cgroup2 cgroup2 /sys/fs/cgroup
cg=/sys/fs/cgroup
setup mkdir "$cg/init"
setup eval 'echo $$ >"$cg/init/cgroup.procs"'
setup eval 'echo "+memory +pids +cpu" >"$cg/cgroup.subtree_control"'
setup mkdir "$cg/harness"
if [[ "$(cat /proctree-vm/layout)" == leaf ]]; then
  setup eval 'echo "+memory +pids +cpu" >"$cg/harness/cgroup.subtree_control"'
  setup mkdir "$cg/harness/main"
  run_in="$cg/harness/main"
else
  run_in="$cg/harness"
fi
setup stty -F /dev/ttyS1 raw -echo
setup stty -F /dev/ttyS2 raw -echo
eval "set -- $(cat /proctree-vm/argv)"
echo "PROCTREE-VM-BOOTED $(uname -r) $(cut -d' ' -f1 /proc/uptime)"
cd /opt/proctree-test/app
(echo "$BASHPID" >"$run_in/cgroup.procs" && exec "$@") </dev/null >/dev/ttyS1 2>/dev/ttyS2
rc=$?
# What COMMAND left behind: killed, so the output ports close and drain.
if [[ -e "$cg/harness/cgroup.kill" ]]; then
  echo 1 >"$cg/harness/cgroup.kill"
else
  for _ in 1 2 3 4 5; do
    pids="$(cat $(find "$cg/harness" -name cgroup.procs) 2>/dev/null)"
    [[ -n "$pids" ]] || break
    kill -KILL $pids 2>/dev/null
    sleep 0.2
  done
fi
# The last close of a serial port waits until its output is sent.
: >/dev/ttyS1
: >/dev/ttyS2
halt "$rc"
INIT
chmod 0755 "$overlay/init"
(cd "$overlay" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$work/overlay.cpio"
# The kernel unpacks concatenated newc archives in order: the root
# filesystem, the installed package, then this call's files.
cat "$fixture/base.cpio" "$app/app.cpio" "$work/overlay.cpio" >"$work/initrd.cpio"
rm -f "$work/overlay.cpio" "$tarball"
rm -rf "$overlay"

# --- boot ----------------------------------------------------------------------
: >"$work/console"
: >"$work/stdout"
: >"$work/stderr"
started=$SECONDS
qemu-system-x86_64 \
  -accel tcg -cpu max -smp 2 -m "$memory_mb" \
  -display none -monitor none -nic none -no-reboot \
  -chardev file,id=console,path="$work/console" -serial chardev:console \
  -chardev file,id=out,path="$work/stdout" -serial chardev:out \
  -chardev file,id=err,path="$work/stderr" -serial chardev:err \
  -kernel "$vmlinuz" -initrd "$work/initrd.cpio" \
  -append "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init cgroup_no_v1=all swapaccount=1" \
  </dev/null >>"$work/console" 2>&1 &
qemu_pid=$!
log "booting linux $kernel (qemu pid $qemu_pid, timeout $timeout s)"
tail -c +1 -f --pid="$qemu_pid" "$work/stdout" &
tail_pids+=($!)
tail -c +1 -f --pid="$qemu_pid" "$work/stderr" >&2 &
tail_pids+=($!)

timed_out=0
deadline=$((SECONDS + timeout))
while kill -0 "$qemu_pid" 2>/dev/null; do
  if ((SECONDS >= deadline)); then
    kill -KILL "$qemu_pid" 2>/dev/null || true
    timed_out=1
    break
  fi
  sleep 1
done
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=
# The readers end on their own once they have read the rest.
for p in "${tail_pids[@]}"; do wait "$p" 2>/dev/null || true; done
tail_pids=()

console="$(tr -d '\r' <"$work/console")"
booted="$(sed -n 's/^PROCTREE-VM-BOOTED \([^ ]*\) \([^ ]*\)$/\1 (booted in \2 s)/p' <<<"$console" | tail -n 1)"
if ((timed_out)); then
  log "the VM overran $timeout s and was killed; its console's tail:"
  tail -n 40 <<<"$console" >&2
  exit 124
fi
status="$(sed -n 's/^PROCTREE-VM-EXIT \([0-9]*\) .*/\1/p' <<<"$console" | tail -n 1)"
if [[ -z "$status" ]] || grep -q '^PROCTREE-VM-SETUP-FAILED' <<<"$console"; then
  log "the VM ended after $((SECONDS - started)) s without running COMMAND to its end; its console's tail:"
  tail -n 40 <<<"$console" >&2
  exit 125
fi
log "linux ${booted:-?}: COMMAND exited $status, VM done in $((SECONDS - started)) s"
exit "$status"
