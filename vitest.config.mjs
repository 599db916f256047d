import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Native code in the threads pool can take the runner down with it.
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
