// Which probes each confinement tier needs, and so which tier 'auto' picks:
// one table, used by capabilities() and by `proctree doctor`. Pure data, so
// doctor can use it even where the addon does not load.
import type { NativeProbe } from './binding/contract';
import type { Confinement } from './types';

/** One probe: whether it worked, and if not the errno (and syscall) seen (as the binding reports it). */
export type Probe = NativeProbe;

export interface Probes {
  /** A cgroup2 mount that shows the harness's own cgroup. */
  cgroup2: Probe;
  /** A call cgroup can be made below the harness's cgroup and a child placed in it. */
  delegation: Probe;
  clone3: Probe;
  /** clone3 with CLONE_INTO_CGROUP (Linux 5.7); without it, clone + cgroup.procs before exec. */
  cloneIntoCgroup: Probe;
  /** pidfd_open (Linux 5.3). */
  pidfd: Probe;
  /** pidfd_send_signal (Linux 5.1). */
  pidfdSendSignal: Probe;
  /** waitid(P_PIDFD) (Linux 5.4): how every tier waits for its main process. */
  waitidPidfd: Probe;
  /** cgroup.freeze on a call cgroup (Linux 5.2). */
  freeze: Probe;
  /** cgroup.kill on a call cgroup (Linux 5.14). */
  cgroupKill: Probe;
  /** A new PID namespace (directly or inside a user namespace). */
  pidns: Probe;
  /** CLONE_NEWUSER | CLONE_NEWPID for an unprivileged harness. */
  userns: Probe;
  /** PR_SET_CHILD_SUBREAPER in a throwaway child. */
  subreaper: Probe;
  /** The proctree-helper executable next to the addon, run once (`--version`). */
  helper: Probe;
  /** A systemd user manager answers (its private socket or the user bus, run by our uid), and systemd-run is on PATH. */
  userManager: Probe;
  /** A sealed call's namespaces (user, PID, mount, cgroup) and its /proc and cgroup2 mounts, in a throwaway child. */
  seal: Probe;
  /** A new session and process group: always available (off Linux: on POSIX, not on Windows). */
  pgroup: Probe;
  /** The main process and its descendants, no group: only with the portable binding (off Linux, PROCTREE_PORTABLE). */
  none: Probe;
}

// Every tier addresses processes only by pidfd and waits with waitid(P_PIDFD):
// without those none can run safely (signalling by number races with pid reuse).
const pidfds = ['pidfd', 'pidfdSendSignal', 'waitidPidfd'] as const;

/** The probes each tier needs, in the order they are checked; the tiers strongest first. */
export const needs: Readonly<Record<Confinement, ReadonlyArray<keyof Probes>>> = {
  cgroup: ['cgroup2', 'delegation', ...pidfds],
  // Reached only when delegation failed (the cgroup tier would have been
  // picked): a user manager hands out a delegated scope instead.
  systemd: ['cgroup2', 'userManager', 'helper', ...pidfds],
  pidns: ['pidns', 'helper', ...pidfds],
  subreaper: ['subreaper', 'helper', ...pidfds],
  pgroup: ['pgroup', ...pidfds],
  none: ['none'],
};

// The portable binding (lib/binding/portable.ts) signals by pid through
// child_process: its pgroup and none tiers need no pidfds (and are not
// race-free for it; verified is 'none').
/** The tiers, strongest first: the one list, the keys of `needs` (string keys keep their order). */
export const tiers = Object.keys(needs) as readonly Confinement[];

const portableNeeds: Readonly<Record<Confinement, ReadonlyArray<keyof Probes>>> = { ...needs, pgroup: ['pgroup'] };

function describeProbe(name: string, p: Probe): string {
  const why = p.syscall ? `(${p.syscall}${p.detail ? ` ${p.detail}` : ''})` : p.errno && p.detail ? `(${p.detail})` : undefined;
  const what = [p.errno, why].filter(Boolean).join(' ');
  return `${name}: ${what || p.detail || 'failed'}`;
}

/** Why `tier` cannot run with these probes, or null when it can; `portable`: the probes are the portable binding's. */
export function tierRejection(probes: Probes, tier: Confinement, portable = false): string | null {
  for (const name of (portable ? portableNeeds : needs)[tier]) {
    const p = probes[name];
    if (!p?.ok) return describeProbe(name, p ?? { ok: false });
  }
  return null;
}

/** The strongest tier that can run, and why each stronger one cannot. */
export function pickTier(probes: Probes, portable = false): { tier: Confinement | null; rejected: Partial<Record<Confinement, string>> } {
  const rejected: Partial<Record<Confinement, string>> = {};
  for (const tier of tiers) {
    const why = tierRejection(probes, tier, portable);
    if (why === null) return { tier, rejected };
    rejected[tier] = why;
  }
  return { tier: null, rejected };
}
