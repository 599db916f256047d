// What this host allows, measured rather than guessed from a kernel version.
import os from 'node:os';

import { native } from './native';
import type { Confinement } from './types';

export interface Capabilities {
  kernel: string;
  cgroup2: { mount: string; own: string; ownPath: string } | null;
  cgroup2Error: string | null;
  /** How children are created: clone3 with CLONE_INTO_CGROUP, or the clone() fallback. */
  clone: 'clone3' | 'clone';
  /** The tier 'auto' picks. */
  tier: Confinement;
}

export function capabilities(): Capabilities {
  let cgroup2: Capabilities['cgroup2'] = null;
  let cgroup2Error: string | null = null;
  try {
    cgroup2 = native.location();
  } catch (err) {
    cgroup2Error = (err as Error).message;
  }
  return { kernel: os.release(), cgroup2, cgroup2Error, clone: native.cloneMethod(), tier: 'cgroup' };
}
