// The public types are the documentation: a harness's typical calls compile
// against the built declarations, and misuse does not (tsc over a fixture
// with @ts-expect-error lines, each of which must be needed). The tests
// themselves are code against those declarations too, and type-check.
import { spawnSync } from 'node:child_process';
import path from 'node:path';

import { expect, it } from 'vitest';

const root = path.resolve(__dirname, '..');

it('typical calls type-check against dist/*.d.ts, and misuse is rejected', () => {
  const r = spawnSync(
    process.execPath,
    [
      path.join(root, 'node_modules/typescript/bin/tsc'),
      '--noEmit',
      '--strict',
      '--target', 'ES2022',
      '--module', 'commonjs',
      '--moduleResolution', 'node',
      '--types', 'node',
      '--lib', 'ES2022,ESNext.Disposable',
      '--skipLibCheck',
      path.join(root, 'test/fixtures/types/usage.ts'),
    ],
    { encoding: 'utf8', cwd: root, timeout: 120_000 },
  );
  expect(r.stdout + r.stderr).toBe('');
  expect(r.status).toBe(0);
});

it('the test files type-check against dist/*.d.ts (tsconfig.test.json)', () => {
  const r = spawnSync(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', path.join(root, 'tsconfig.test.json')], {
    encoding: 'utf8',
    cwd: root,
    timeout: 240_000,
  });
  expect(r.stdout + r.stderr).toBe('');
  expect(r.status).toBe(0);
}, 300_000);
