// A relative `cwd` means the same in every tier: resolved against this
// process's cwd when the call is made, as Node's child does when it chdirs.
// (The systemd tier's broker runs in /, where a relative cwd would land
// elsewhere: test/systemd.test.ts checks it there through its fixture.)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { capabilities, run } from '../dist/cjs/index.js';
import { tierRejection } from '../dist/cjs/tiers.js';

const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-cwd-')));
fs.mkdirSync(path.join(base, 'sub'));
afterAll(() => fs.rmSync(base, { recursive: true, force: true }));

const caps = capabilities();
const local = (['cgroup', 'pidns', 'subreaper', 'pgroup'] as const).filter(
  (t) => tierRejection(caps.probes, t, caps.portable !== null) === null,
);

describe('a relative cwd', () => {
  it('runs here in at least one tier', () => {
    expect(local.length).toBeGreaterThan(0);
  });

  it.each(local)('%s: resolved against the harness cwd', async (tier) => {
    const relative = path.relative(process.cwd(), path.join(base, 'sub'));
    expect(path.isAbsolute(relative)).toBe(false);
    const r = await run('pwd', [], { cwd: relative, confinement: tier });
    expect(r.stdout).toBe(`${path.join(base, 'sub')}\n`);
  });
});
