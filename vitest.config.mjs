import os from 'node:os';

import { defineConfig } from 'vitest/config';

const cpus = typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length;

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Native code in the threads pool can take the runner down with it.
    pool: 'forks',
    // Two test files at a time even on two cores (vitest's default there is
    // one): most files spend their time waiting on programs, VMs and timers,
    // and the suite is written to pass under load (scripts/stress-test.sh
    // runs it with a busy loop per CPU besides). On two cores this halves the
    // suite's wall time; on more, vitest's own default (CPUs - 1) stands.
    maxWorkers: Math.max(2, cpus - 1),
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
