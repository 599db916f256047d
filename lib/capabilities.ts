// What this host allows, measured rather than guessed from a kernel version:
// each probe is a real attempt (a throwaway cgroup, a throwaway clone, the
// helper run once), run on first use and cached; the addon blocks for a few
// milliseconds then.
import os from 'node:os';
import path from 'node:path';

import { ConfinementUnavailableError, proctreeError } from './errors';
import { binding, embeddedHelper, nativePath, portable } from './binding';
import type { NativeErrorShape, NativeLocation, PortableMode } from './binding/contract';
import { type LimitsCapability, probeLimits } from './limits';
import { needs, pickTier, type Probe, type Probes, tierRejection, tiers } from './tiers';
import type { Confinement } from './types';

export type { Probe, Probes } from './tiers';

export interface Capabilities {
  kernel: string;
  /** Where cgroup2 is mounted and the harness's cgroup in it; null without cgroup2. */
  cgroup2: NativeLocation | null;
  /**
   * How the cgroup tier creates children: clone3 into the cgroup, or clone()
   * + cgroup.procs; `child_process` with the portable binding.
   */
  clone: 'clone3' | 'clone' | 'child_process';
  probes: Probes;
  /** The tier 'auto' picks: the strongest whose probes all passed; null when none can run. */
  tier: Confinement | null;
  /** Why each tier stronger than `tier` was rejected, e.g. `{ cgroup: 'delegation: EACCES (mkdir …)' }`. */
  rejected: Partial<Record<Confinement, string>>;
  /**
   * Set when no addon runs the calls but the portable binding does (off
   * Linux, or PROCTREE_PORTABLE set; README "Off Linux"): why, and how it
   * reads the process table. Its tiers are `pgroup` (POSIX) and `none`, every
   * Linux probe says `ENOSYS` with the reason, and every report says
   * `verified: 'none'`. null with the addon.
   */
  portable: PortableMode | null;
  /**
   * Which `limits` a call of the `cgroup` tier can have here (memory, pids,
   * cpu: the controllers enabled for the harness's subtrees, or that
   * proctree may enable itself), where its subtrees go, and why the others
   * cannot, with the fix. All false when 'auto' does not pick `cgroup`.
   */
  limits: LimitsCapability;
  /**
   * Whether a call can be sealed here (`seal: true`, README "Sealed calls"):
   * the cgroup tier, and the user, PID, mount and cgroup namespaces with
   * their own /proc and cgroup2, tried for real. `why` says what is missing.
   */
  seal: SealCapability;
}

export interface SealCapability {
  available: boolean;
  /** Why a call cannot be sealed here (absent when it can). */
  why?: string;
}

let cached: Capabilities | null = null;

let helperFile: string | undefined;
/**
 * The proctree-helper executable: next to the addon, or in a Bun single-file
 * executable the one embedded in it, copied out (lib/binding.ts).
 */
export function helperPath(): string {
  helperFile ??= embeddedHelper() ?? path.join(path.dirname(nativePath), 'proctree-helper');
  return helperFile;
}

// A probe that failed only because this process was out of descriptors
// (EMFILE) or the system was (ENFILE) says nothing about the host.
function shortOfDescriptors(p: Probe | undefined): boolean {
  return p !== undefined && !p.ok && (p.errno === 'EMFILE' || p.errno === 'ENFILE');
}

/**
 * What this host allows, probed for real on the first call and cached (the
 * probes block for a few milliseconds). `tier` is what confinement 'auto'
 * uses; `rejected` says why each stronger tier was not picked. A result with
 * a probe that ran out of descriptors is not cached: the next call probes
 * again (once descriptors are free, the host is what it always was).
 */
export function capabilities(): Capabilities {
  if (cached) return cached;
  const raw = binding.probe(helperPath());
  const probes: Probes = {
    ...raw.probes,
    pgroup: raw.probes.pgroup ?? { ok: true, detail: 'setsid + signal by pidfd; cannot catch setsid escapes' },
    none: raw.probes.none ?? { ok: false, detail: 'only without the addon (off Linux, or PROCTREE_PORTABLE=1): the tiers above are stronger' },
    seal: raw.probes.seal ?? { ok: false, errno: 'ENOSYS', detail: 'only the Linux addon can seal a call' },
  };
  const { tier, rejected } = pickTier(probes, portable !== null);
  const caps: Capabilities = {
    kernel: os.release(),
    cgroup2: raw.location,
    clone: portable ? 'child_process' : probes.cloneIntoCgroup.ok ? 'clone3' : 'clone',
    probes,
    tier,
    rejected,
    portable,
    limits: limitsFor(tier),
    seal: sealFor(probes),
  };
  if (!Object.values(probes).some(shortOfDescriptors)) cached = caps;
  return caps;
}

/** capabilities().seal: the cgroup tier, the helper (the shim) and the namespaces' probe. */
function sealFor(probes: Probes): SealCapability {
  if (portable) return { available: false, why: `the portable binding cannot seal (${portable.reason})` };
  const cgroup = tierRejection(probes, 'cgroup');
  if (cgroup !== null) return { available: false, why: `sealing needs the cgroup tier, which cannot run here (${cgroup})` };
  for (const name of ['helper', 'seal'] as const) {
    const p = probes[name];
    if (p.ok) continue;
    const what = [p.errno, p.syscall, p.detail].filter(Boolean).join(' ');
    if (name === 'seal' && p.detail?.startsWith('CLONE_NEWUSER')) {
      return {
        available: false,
        why:
          `new user namespaces are refused here (${what}): a seccomp profile (a container engine's default), ` +
          "AppArmor's restriction of unprivileged user namespaces, or user.max_user_namespaces=0",
      };
    }
    return { available: false, why: `${name === 'seal' ? 'the namespaces' : 'the helper'}: ${what || 'failed'}` };
  }
  return { available: true };
}

/**
 * Why a call of `tier` cannot be sealed here, or null when it can: only the
 * cgroup tier seals, and only where capabilities().seal is available.
 */
export function sealRefusal(tier: Confinement): string | null {
  if (tier !== 'cgroup') return `only the cgroup tier can seal a call, and this call's is '${tier}'`;
  return capabilities().seal.why ?? null;
}

/**
 * Whether a sealed call's start error means the seal could not be made (the
 * namespaces, the id maps, the mounts, the capability drop: nothing of the
 * command ran), rather than the command failing to start: `syscall` and
 * `code` as the addon or the shim reports them.
 */
export function sealStepFailed(syscall: string | undefined, code: string | undefined): boolean {
  if (syscall === 'unshare' || syscall === 'mount' || syscall === 'capset' || syscall === 'uid_map') return true;
  // The namespaces refused (a filter, a limit on user namespaces), not a
  // clone that failed for want of memory or processes.
  const refused = code === 'EPERM' || code === 'EINVAL' || code === 'ENOSPC' || code === 'EUSERS';
  return (syscall === 'clone3' || syscall === 'clone') && refused;
}

/** ERR_PROCTREE_SEAL_UNAVAILABLE: the call was not run, never run unsealed. */
export function sealUnavailable(why: string): Error & { code: string } {
  return proctreeError('ERR_PROCTREE_SEAL_UNAVAILABLE', `the call cannot be sealed here, so it was not run: ${why}`);
}

/** capabilities().limits: the cgroup tier's, or none with the reason. */
function limitsFor(tier: Confinement | null): LimitsCapability {
  const probed = probeLimits();
  if (tier === 'cgroup' || portable) return probed;
  const why = `limits need the cgroup tier, and 'auto' picks ${tier === null ? 'none' : `the ${tier} tier`} here`;
  return { memory: false, pids: false, cpu: false, cgroup: probed.cgroup, reason: probed.reason ? `${why}; ${probed.reason}` : why };
}

/**
 * The errno of a probe that ran out of descriptors and so decided which tier
 * `confinement` runs in (for 'auto': any tier up to the one picked, which
 * would otherwise be a weaker tier than the host allows); null when none did.
 */
function probeShortage(caps: Capabilities, confinement: 'auto' | Confinement): NativeErrorShape | null {
  const upTo = confinement === 'auto' ? (caps.tier ?? tiers[tiers.length - 1]) : confinement;
  const decided = confinement === 'auto' ? tiers.slice(0, tiers.indexOf(upTo) + 1) : [confinement];
  for (const tier of decided) {
    for (const name of needs[tier]) {
      const p = caps.probes[name];
      if (!shortOfDescriptors(p)) continue;
      const code = p.errno as 'EMFILE' | 'ENFILE';
      const err = new Error(`${code}: ${p.syscall ?? 'probe'} while probing the host (${name})`) as NativeErrorShape;
      err.code = code;
      err.errno = os.constants.errno[code];
      err.syscall = p.syscall || 'probe';
      if (p.detail) err.path = p.detail;
      return err;
    }
  }
  return null;
}

/**
 * The tier a call with `confinement` runs in, or the descriptor shortage
 * (EMFILE, ENFILE) that kept the probes from saying: that call's start
 * error, which Node reports as an 'error' event, not a throw (its
 * test-child-process-emfile). `tier` is then the one it was asked for, or
 * for 'auto' the strongest the probes that ran allow. Throws when the tier
 * cannot run here.
 */
export function tierFor(confinement: 'auto' | Confinement): { tier: Confinement; shortage: NativeErrorShape | null } {
  const caps = capabilities();
  // Answers are kept only when no probe ran short (capabilities()): no
  // walk over the probes per call then.
  const shortage = caps === cached ? null : probeShortage(caps, confinement);
  if (shortage === null) return { tier: resolveWith(caps, confinement), shortage };
  if (confinement !== 'auto') return { tier: confinement, shortage };
  const hopeful = Object.fromEntries(
    Object.entries(caps.probes).map(([k, p]) => [k, shortOfDescriptors(p) ? { ok: true } : p]),
  ) as unknown as Probes;
  return { tier: pickTier(hopeful, caps.portable !== null).tier ?? 'pgroup', shortage };
}

/** The tier a call with `confinement` runs in; throws when it cannot run here. */
export function resolveTier(confinement: 'auto' | Confinement): Confinement {
  return resolveWith(capabilities(), confinement);
}

function resolveWith(caps: Capabilities, confinement: 'auto' | Confinement): Confinement {
  if (confinement === 'auto') {
    if (caps.tier === null) {
      const why = Object.entries(caps.rejected).map(([t, r]) => `${t}: ${r}`).join('; ');
      throw new ConfinementUnavailableError(`no confinement tier can run here (${why})`);
    }
    return caps.tier;
  }
  const why = tierRejection(caps.probes, confinement, caps.portable !== null);
  if (why !== null) {
    throw new ConfinementUnavailableError(`confinement '${confinement}' is not available here: ${why}`);
  }
  return confinement;
}

let guardianWarned = false;

/**
 * The native layer made a cgroup subtree and could not start the guardian
 * that stops its calls when this process dies without running 'exit'
 * listeners (SIGKILL, a crash): said once, as a process warning.
 */
export function warnNoGuardian(err: Error): void {
  if (guardianWarned) return;
  guardianWarned = true;
  process.emitWarning(
    `proctree: no guardian (${err.message}); calls are still stopped on a normal exit, but not if this process is killed with SIGKILL`,
    { code: 'PROCTREE_NO_GUARDIAN' },
  );
}
