// `limits` where they cannot be enforced: never silently
// unlimited. On hosts like these, whose cgroup2 mount has no memory, pids or
// cpu controller (they are bound to cgroup v1), and in the pidns, subreaper
// and pgroup tiers on any host, a call with limits fails with
// ERR_PROCTREE_LIMITS_UNAVAILABLE naming the controller and the fix, and its
// command does not run: proved by a file the command would have made. Bad
// values are refused at the boundary with Node's codes. (Where the limits
// hold, test/limits-vm.test.ts proves them in a VM.)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { spawnSync } from 'node:child_process';

import { afterAll, describe, expect, it } from 'vitest';

import { capabilities, run, spawn, Supervisor } from '../dist/cjs/index.js';
import { renderDoctor } from '../dist/cjs/cli/doctor.js';
import { planRun, verdictLines } from '../dist/cjs/cli/run.js';
import { fileSupervisors } from './supervisors';

const { supervisor } = fileSupervisors('limits');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-limits-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const caps = capabilities();
const noControllers = caps.tier === 'cgroup' && !caps.limits.memory && !caps.limits.pids && !caps.limits.cpu;
let n = 0;

/** A command that leaves a file behind if it runs at all. */
function marker(): { file: string; argv: [string, string[]] } {
  const file = path.join(dir, `ran-${++n}`);
  return { file, argv: ['sh', ['-c', `touch ${file}`]] };
}

describe('limits that cannot be enforced here', () => {
  it.skipIf(!noControllers)('capabilities().limits says none, and why, with the fix; doctor shows it', () => {
    expect(caps.limits).toMatchObject({ memory: false, pids: false, cpu: false });
    expect(caps.limits.reason).toMatch(/memory,pids,cpu: not on this cgroup2 hierarchy at \S+ \(its cgroup.controllers\).*cgroup_no_v1=memory,pids,cpu/);
    const text = renderDoctor(caps);
    expect(text).toMatch(/^limits: memory no, pids no, cpu no$/m);
    expect(text).toContain(`  fix: ${caps.limits.reason}`);
  });

  it.skipIf(!noControllers)("spawn(): 'error' with ERR_PROCTREE_LIMITS_UNAVAILABLE naming the controller and the fix, then 'close'; nothing ran", async () => {
    const m = marker();
    const call = spawn(m.argv[0], m.argv[1], { limits: { pids: 64 } });
    const errors: Array<Error & { code?: string }> = [];
    call.on('error', (e) => errors.push(e));
    const code = await new Promise((resolve) => call.on('close', resolve));
    expect(errors).toHaveLength(1);
    expect(errors[0].code).toBe('ERR_PROCTREE_LIMITS_UNAVAILABLE');
    // Only the controller asked for, with its fix.
    expect(errors[0].message).toMatch(/not run: pids: not on this cgroup2 hierarchy .* cgroup_no_v1=pids/);
    expect(errors[0].message).not.toMatch(/memory|cpu:/);
    expect(call.pid).toBeUndefined();
    expect(code).toBeNull();
    expect(fs.existsSync(m.file)).toBe(false);
  });

  it.skipIf(!noControllers)('run() rejects with it, for every controller asked', async () => {
    const m = marker();
    const err = await run(m.argv[0], m.argv[1], { limits: { memoryBytes: 128 * 2 ** 20, cpu: 0.5 } }).catch((e: Error) => e);
    expect(err).toMatchObject({ code: 'ERR_PROCTREE_LIMITS_UNAVAILABLE' });
    expect((err as Error).message).toMatch(/memory,cpu: not on this cgroup2 hierarchy/);
    expect(fs.existsSync(m.file)).toBe(false);
  });

  it.skipIf(!noControllers)("a Supervisor's limits (its subtree's total) refuse its calls the same way", async () => {
    const sup = new Supervisor({ name: `limits-total-${process.pid}`, limits: { pids: 16 } });
    try {
      const m = marker();
      const err = await sup.run(m.argv[0], m.argv[1]).catch((e: Error) => e);
      expect(err).toMatchObject({ code: 'ERR_PROCTREE_LIMITS_UNAVAILABLE' });
      expect((err as Error).message).toMatch(/pids: not on this cgroup2 hierarchy/);
      expect(fs.existsSync(m.file)).toBe(false);
    } finally {
      await sup.shutdown();
    }
  });

  for (const tier of ['pidns', 'subreaper', 'pgroup'] as const) {
    it.skipIf(!caps.probes[tier].ok)(`the ${tier} tier refuses them on any host: it has no cgroup leaf of ours`, async () => {
      const m = marker();
      const err = await supervisor()
        .run(m.argv[0], m.argv[1], { confinement: tier, limits: { cpu: 1 } })
        .catch((e: Error) => e);
      expect(err).toMatchObject({ code: 'ERR_PROCTREE_LIMITS_UNAVAILABLE' });
      expect((err as Error).message).toContain(`cpu: the ${tier} tier has no cgroup leaf of ours to hold them`);
      expect(fs.existsSync(m.file)).toBe(false);
    });
  }

  it('calls without limits are unaffected', async () => {
    const m = marker();
    const r = await supervisor().run(m.argv[0], m.argv[1]);
    expect(r.exitCode).toBe(0);
    expect(r.oomKilled).toBe(false);
    expect(r.pidsLimited).toBe(false);
    expect(fs.existsSync(m.file)).toBe(true);
  });
});

describe('limits are validated at the boundary', () => {
  it('throws ERR_INVALID_ARG_TYPE and ERR_OUT_OF_RANGE synchronously, before anything runs', () => {
    const cases: Array<[unknown, string, RegExp]> = [
      ['512M', 'ERR_INVALID_ARG_TYPE', /"options.limits" property must be of type object/],
      [{ memoryBytes: '512M' }, 'ERR_INVALID_ARG_TYPE', /"options.limits.memoryBytes" property must be of type number/],
      [{ memoryBytes: 1000 }, 'ERR_OUT_OF_RANGE', /"options.limits.memoryBytes" is out of range. It must be an integer >= 1048576/],
      [{ memoryBytes: 2 ** 20 + 0.5 }, 'ERR_OUT_OF_RANGE', /memoryBytes/],
      [{ pids: 0 }, 'ERR_OUT_OF_RANGE', /"options.limits.pids" is out of range/],
      [{ pids: 1.5 }, 'ERR_OUT_OF_RANGE', /pids/],
      [{ cpu: 0.001 }, 'ERR_OUT_OF_RANGE', /"options.limits.cpu" is out of range. It must be a number >= 0.01/],
      [{ cpu: Number.NaN }, 'ERR_OUT_OF_RANGE', /cpu/],
      [{ cpu: true }, 'ERR_INVALID_ARG_TYPE', /"options.limits.cpu" property must be of type number/],
    ];
    for (const [limits, code, message] of cases) {
      const m = marker();
      expect(() => spawn(m.argv[0], m.argv[1], { limits: limits as never }), JSON.stringify(limits)).toThrow(
        expect.objectContaining({ code, message: expect.stringMatching(message) }),
      );
      expect(() => new Supervisor({ name: `limits-bad-${++n}`, limits: limits as never })).toThrow(expect.objectContaining({ code }));
      expect(fs.existsSync(m.file)).toBe(false);
    }
  });

  it('an empty limits object, or null, is no limit', async () => {
    for (const limits of [{}, null, undefined]) {
      const m = marker();
      const r = await supervisor().run(m.argv[0], m.argv[1], { limits: limits as never });
      expect(r.exitCode).toBe(0);
      expect(fs.existsSync(m.file)).toBe(true);
    }
  });
});

describe('proctree run --memory --pids --cpu', () => {
  const bin = path.join(__dirname, '..', 'bin', 'proctree.js');

  it('maps the flags to limits: sizes in K/M/G, CPUs as a decimal', () => {
    const plan = planRun(['--memory', '512M', '--pids', '256', '--cpu', '1.5', '--', 'true']);
    expect(plan).not.toBe('help');
    expect(plan !== 'help' && plan.options.limits).toEqual({ memoryBytes: 512 * 2 ** 20, pids: 256, cpu: 1.5 });
    expect(planRun(['true']) !== 'help' && (planRun(['true']) as { options: object }).options).not.toHaveProperty('limits');
  });

  it('says what the kernel did, one line each', () => {
    expect(verdictLines({ oomKilled: true, pidsLimited: true })).toEqual([
      'proctree: out of memory: the kernel killed a process of the tree at its memory limit',
      'proctree: process limit: a fork of the tree was refused at its process limit',
    ]);
    expect(verdictLines({ oomKilled: false, pidsLimited: false })).toEqual([]);
  });

  it('a bad value is a usage error (status 2); nothing runs', () => {
    for (const flags of [['--cpu', 'x'], ['--pids', '-3'], ['--memory', 'lots'], ['--pids', '0'], ['--cpu', '0.001']]) {
      const m = marker();
      const r = spawnSync(process.execPath, [bin, 'run', ...flags, '--', m.argv[0], ...m.argv[1]], { encoding: 'utf8' });
      expect(r.status, `${flags.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toMatch(/^proctree: /);
      expect(fs.existsSync(m.file)).toBe(false);
    }
  });

  it.skipIf(!noControllers)('limits it cannot enforce: status 125, the reason on stderr, the command never ran', () => {
    const m = marker();
    const r = spawnSync(process.execPath, [bin, 'run', '--memory', '512M', '--pids', '256', '--cpu', '1.5', '--', m.argv[0], ...m.argv[1]], {
      encoding: 'utf8',
    });
    expect(r.status).toBe(125);
    expect(r.stderr).toMatch(/^proctree: limits cannot be enforced here, so the command was not run: memory,pids,cpu: not on this cgroup2 hierarchy/);
    expect(fs.existsSync(m.file)).toBe(false);
  });
});
