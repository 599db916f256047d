// What this host allows, measured rather than guessed from a kernel version:
// each probe is a real attempt (a throwaway cgroup, a throwaway clone), run
// once on first use and cached; the addon blocks for a few milliseconds then.
import os from 'node:os';
import path from 'node:path';

import { ConfinementUnavailableError } from './errors';
import { native, nativePath } from './native';
import type { Confinement } from './types';

/** One probe: whether it worked, and if not the errno (and syscall) seen. */
export interface Probe {
  ok: boolean;
  errno?: string;
  syscall?: string;
  detail?: string;
}

export interface Probes {
  /** A cgroup2 mount, and the harness's own cgroup in it. */
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
  /** cgroup.freeze on a call cgroup (Linux 5.2). */
  freeze: Probe;
  /** cgroup.kill on a call cgroup (Linux 5.14). */
  cgroupKill: Probe;
  /** A new PID namespace (directly or inside a user namespace) and the helper to be its init. */
  pidns: Probe;
  /** CLONE_NEWUSER | CLONE_NEWPID for an unprivileged harness. */
  userns: Probe;
  /** PR_SET_CHILD_SUBREAPER in a throwaway child, and the helper to be the shim. */
  subreaper: Probe;
  /** The proctree-helper executable next to the addon. */
  helper: Probe;
  /** A new session and process group: always available. */
  pgroup: Probe;
}

export interface Capabilities {
  kernel: string;
  /** Where cgroup2 is mounted and the harness's cgroup in it; null without cgroup2. */
  cgroup2: { mount: string; own: string; ownPath: string } | null;
  /** How the cgroup tier creates children: clone3 into the cgroup, or clone() + cgroup.procs. */
  clone: 'clone3' | 'clone';
  probes: Probes;
  /** The tier 'auto' picks: the strongest whose probes all passed. */
  tier: Confinement;
  /** Why each tier stronger than `tier` was rejected, e.g. `{ cgroup: 'delegation: EACCES (mkdir …)' }`. */
  rejected: Partial<Record<Confinement, string>>;
}

export const tiers: readonly Confinement[] = ['cgroup', 'pidns', 'subreaper', 'pgroup'];

/** The probes each tier needs, in the order they are checked. */
const needs: Record<Confinement, ReadonlyArray<keyof Probes>> = {
  cgroup: ['cgroup2', 'delegation', 'pidfd', 'pidfdSendSignal'],
  pidns: ['pidns', 'helper', 'pidfd', 'pidfdSendSignal'],
  subreaper: ['subreaper', 'helper', 'pidfd', 'pidfdSendSignal'],
  pgroup: ['pgroup'],
};

let cached: Capabilities | null = null;

export function helperPath(): string {
  return path.join(path.dirname(nativePath), 'proctree-helper');
}

function describeProbe(name: string, p: Probe): string {
  const what = [p.errno, p.syscall && `(${p.syscall}${p.detail ? ` ${p.detail}` : ''})`].filter(Boolean).join(' ');
  return `${name}: ${what || p.detail || 'failed'}`;
}

/** Why `tier` cannot run here, or null when it can. */
export function tierRejection(caps: Capabilities, tier: Confinement): string | null {
  for (const name of needs[tier]) {
    const p = caps.probes[name];
    if (!p.ok) return describeProbe(name, p);
  }
  return null;
}

/**
 * What this host allows, probed for real on the first call and cached (the
 * probes block for a few milliseconds). `tier` is what confinement 'auto'
 * uses; `rejected` says why each stronger tier was not picked.
 */
export function capabilities(): Capabilities {
  if (cached) return cached;
  const raw = native.probe(helperPath());
  const probes = { ...raw.probes, pgroup: { ok: true, detail: 'setsid + signal by pidfd; cannot catch setsid escapes' } } as Probes;
  const caps: Capabilities = {
    kernel: os.release(),
    cgroup2: raw.location,
    clone: probes.cloneIntoCgroup.ok ? 'clone3' : 'clone',
    probes,
    tier: 'pgroup',
    rejected: {},
  };
  for (const tier of tiers) {
    const why = tierRejection(caps, tier);
    if (why === null) {
      caps.tier = tier;
      break;
    }
    caps.rejected[tier] = why;
  }
  cached = caps;
  return caps;
}

/** The tier a call with `confinement` runs in; throws when an explicit tier cannot run here. */
export function resolveTier(confinement: 'auto' | Confinement): Confinement {
  const caps = capabilities();
  if (confinement === 'auto') return caps.tier;
  const why = tierRejection(caps, confinement);
  if (why !== null) {
    throw new ConfinementUnavailableError(`confinement '${confinement}' is not available here: ${why}`);
  }
  return confinement;
}
