// Supervisors a test file makes, and the cgroups of their calls: after the
// file's tests (even when one failed) every supervisor is shut down and
// whatever is still in those cgroups is killed.
import { afterAll } from 'vitest';

import { Supervisor, type SupervisorOptions } from '../dist/cjs/index.js';
import { killCgroup } from './helpers';

export function fileSupervisors(prefix: string): { supervisor: (options?: SupervisorOptions) => Supervisor; cgroups: string[] } {
  const made: Supervisor[] = [];
  const cgroups: string[] = [];
  let n = 0;
  afterAll(async () => {
    for (const sup of made) await sup.shutdown({ grace: 0 }).catch(() => undefined);
    for (const cg of cgroups) killCgroup(cg);
  });
  const supervisor = (options: SupervisorOptions = {}): Supervisor => {
    const sup = new Supervisor({ name: `${prefix}-${process.pid}-${++n}`, ...options });
    made.push(sup);
    return sup;
  };
  return { supervisor, cgroups };
}
