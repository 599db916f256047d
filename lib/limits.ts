// Limits a tool call cannot exceed: memory, processes and CPU of
// its whole tree, kept by the kernel in the call's cgroup leaf (memory.max
// with memory.swap.max 0, pids.max, cpu.max) or, for a supervisor's
// `limits`, in its subtree (the total of all its calls). The addon writes
// them before the command runs and clears them before a reused leaf serves
// its next call (native/loop/subtrees.cc, native/kernel/limits.h).
//
// Never silently unlimited: where a controller is not available to the
// harness (the pidns, subreaper and pgroup tiers, a cgroup2 hierarchy
// without it, a cgroup the kernel will not enable it in), the call does not
// run and fails with ERR_PROCTREE_LIMITS_UNAVAILABLE naming the controller
// and the fix.
import { invalidArgType, outOfRange, proctreeError } from './errors';
import { binding, portable } from './binding';
import type { NativeLimits } from './binding/contract';

/** The kernel's floor for cpu.max's quota is 1 ms of a 100 ms period. */
const MIN_CPU = 0.01;
const MIN_MEMORY = 1024 * 1024;

/**
 * `limits` validated at the boundary (ERR_INVALID_ARG_TYPE,
 * ERR_OUT_OF_RANGE); null when absent or empty.
 */
export function resolveLimits(value: unknown, name = 'options.limits'): NativeLimits | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'object' || Array.isArray(value)) throw invalidArgType(name, 'Object', value);
  const v = value as Record<string, unknown>;
  const out: NativeLimits = {};
  const memoryBytes = v.memoryBytes;
  if (memoryBytes !== undefined) {
    if (typeof memoryBytes !== 'number') throw invalidArgType(`${name}.memoryBytes`, 'number', memoryBytes);
    if (!Number.isSafeInteger(memoryBytes) || memoryBytes < MIN_MEMORY) {
      throw outOfRange(`${name}.memoryBytes`, `an integer >= ${MIN_MEMORY} (1 MiB)`, memoryBytes);
    }
    out.memoryBytes = memoryBytes;
  }
  const pids = v.pids;
  if (pids !== undefined) {
    if (typeof pids !== 'number') throw invalidArgType(`${name}.pids`, 'number', pids);
    if (!Number.isInteger(pids) || pids < 1 || pids > 2 ** 31 - 1) throw outOfRange(`${name}.pids`, 'an integer >= 1 and <= 2147483647', pids);
    out.pids = pids;
  }
  const cpu = v.cpu;
  if (cpu !== undefined) {
    if (typeof cpu !== 'number') throw invalidArgType(`${name}.cpu`, 'number', cpu);
    if (!Number.isFinite(cpu) || cpu < MIN_CPU || cpu > 1e6) throw outOfRange(`${name}.cpu`, `a number >= ${MIN_CPU} and <= 1000000`, cpu);
    out.cpu = cpu;
  }
  return Object.keys(out).length > 0 ? out : null;
}

/** The controllers these limits need, by name. */
export function controllersOf(limits: NativeLimits | null): Array<'memory' | 'pids' | 'cpu'> {
  if (!limits) return [];
  const names: Array<'memory' | 'pids' | 'cpu'> = [];
  if (limits.memoryBytes !== undefined) names.push('memory');
  if (limits.pids !== undefined) names.push('pids');
  if (limits.cpu !== undefined) names.push('cpu');
  return names;
}

/** ERR_PROCTREE_LIMITS_UNAVAILABLE: `why` names the controllers, the reason and the fix. */
export function limitsUnavailable(why: string): Error & { code: string } {
  return proctreeError('ERR_PROCTREE_LIMITS_UNAVAILABLE', `limits cannot be enforced here, so the command was not run: ${why}`);
}

/** Why limits cannot run in this process at all (the portable binding), or null. */
export function limitsRefusedHere(names: readonly string[]): string | null {
  if (names.length === 0 || !portable) return null;
  return `${names.join(',')}: limits need the Linux addon's cgroup tier, and this process runs the portable binding (${portable.reason})`;
}

/** `capabilities().limits`: which limits a call can have here, and why not the others. */
export interface LimitsCapability {
  memory: boolean;
  pids: boolean;
  cpu: boolean;
  /** Where the harness's subtrees (and so the limits' cgroups) go; null without cgroup2. */
  cgroup: string | null;
  /** For the controllers that are not available: why, and the fix. '' when all are. */
  reason: string;
}

/**
 * What the cgroup tier can limit here: the controllers enabled for the
 * harness's subtrees, or that proctree may enable itself (read from
 * cgroup.controllers and cgroup.subtree_control, nothing written). Calls
 * in other tiers get none.
 */
export function probeLimits(): LimitsCapability {
  const probe = binding.limitsProbe?.();
  if (!probe) {
    const why = limitsRefusedHere(['memory', 'pids', 'cpu']) ?? 'this binding has no limits';
    return { memory: false, pids: false, cpu: false, cgroup: null, reason: why };
  }
  if ('error' in probe) {
    return { memory: false, pids: false, cpu: false, cgroup: null, reason: `no cgroup2 to hold them (${probe.error.message})` };
  }
  return { ...probe.available, cgroup: probe.parent, reason: probe.reason };
}
