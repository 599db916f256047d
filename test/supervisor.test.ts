// Many calls under one supervisor, and nothing left behind however the harness
// dies: normal exit, process.exit(), a throw, SIGTERM, SIGKILL.
import { spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';

import { describe, expect, it } from 'vitest';

import { Supervisor } from '../dist/cjs/index.js';
import { cgroupMembers, inFreshNode, killCgroup, liveWith, token, waitForLive } from './helpers';
import { fileSupervisors } from './supervisors';

const harness = path.join(__dirname, 'fixtures', 'harness.cjs');

async function until(check: () => boolean, timeoutMs: number): Promise<number> {
  const start = performance.now();
  while (!check() && performance.now() - start < timeoutMs) await new Promise((r) => setTimeout(r, 10));
  return performance.now() - start;
}

const { supervisor } = fileSupervisors('sup');

function guardiansOf(pid: number): number[] {
  return liveWith(`proctree-${pid}`, 'proctree-guard');
}

describe('the harness dies: nothing is left', () => {
  it.each(['exit', 'process.exit', 'throw', 'SIGTERM', 'SIGKILL'])('%s', async (mode) => {
    const t = token();
    const child = cpSpawn(process.execPath, [harness, mode.startsWith('SIG') ? 'signal' : mode, t], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let group = '';
    try {
      const line = await new Promise<string>((resolve, reject) => {
        child.stdout.once('data', (d: Buffer) => resolve(d.toString()));
        child.once('exit', () => reject(new Error('harness died before it was ready')));
      });
      group = JSON.parse(line).group;
      expect(cgroupMembers(group).length).toBe(60);
      expect(guardiansOf(child.pid as number)).toHaveLength(1);
      const exited = new Promise((r) => child.once('exit', r));
      const killedAt = performance.now();
      child.stdin.write('go\n');
      if (mode.startsWith('SIG')) {
        await new Promise((r) => setTimeout(r, 50));
        child.kill(mode as NodeJS.Signals);
      }
      await exited;
      // Promptly (within 5 s: it takes far less, but a loaded 2-core machine
      // can stretch the harness's exit and the kill of 60 processes past
      // 1 s) every process of every tree is gone, the subtree removed, and
      // the guardian has finished its work and exited.
      await until(() => liveWith(t).length === 0 && !fs.existsSync(group) && guardiansOf(child.pid as number).length === 0, 10_000);
      const took = performance.now() - killedAt;
      expect(liveWith(t)).toEqual([]);
      expect(fs.existsSync(group)).toBe(false);
      expect(guardiansOf(child.pid as number)).toEqual([]);
      expect(took).toBeLessThan(5000 + (mode === 'exit' || mode === 'throw' ? 1000 : 0));
    } finally {
      child.kill('SIGKILL');
      if (group && fs.existsSync(group)) {
        for (const leaf of fs.readdirSync(group)) if (leaf.startsWith('c')) killCgroup(`${group}/${leaf}`);
        killCgroup(group);
      }
    }
  });
});

describe('Supervisor', () => {
  it('handleSignals: SIGTERM runs the graceful shutdown, then the harness dies of SIGTERM', async () => {
    const t = token();
    const child = cpSpawn(process.execPath, [harness, 'handled-signal', t], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    try {
      await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
      child.stdin.write('go\n');
      await new Promise((r) => setTimeout(r, 50));
      const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_c, sig) => resolve(sig)));
      child.kill('SIGTERM');
      expect(await exited).toBe('SIGTERM');
      expect(out).toContain('all 20 stopped gracefully');
      expect(liveWith(t)).toEqual([]);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('maxConcurrent: 200 calls, at most 16 at once, all complete and reported', async () => {
    await using sup = new Supervisor({ name: `limit-${process.pid}`, maxConcurrent: 16 });
    let peak = 0;
    let group = '';
    sup.on('call', (call) =>
      call.on('spawn', () => {
        group = path.dirname(call.cgroup as string);
        // The kernel's count: leaf cgroups in the supervisor's subtree now.
        const leaves = fs.readdirSync(group).filter((n) => /^c\d+$/.test(n)).length;
        peak = Math.max(peak, leaves);
      }),
    );
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => sup.run('sh', ['-c', `sleep 0.0${i % 5}; echo ${i}`])),
    );
    expect(peak).toBeLessThanOrEqual(16);
    expect(peak).toBeGreaterThan(1);
    expect(results.map((r) => r.stdout)).toEqual(Array.from({ length: 200 }, (_, i) => `${i}\n`));
    expect(results.filter((r) => r.queuedMs > 0).length).toBeGreaterThan(100);
    expect(sup.calls.size).toBe(0);
    await sup.shutdown();
  });

  it('shutdown() on 100 live trees of 10 processes: 100 reports, zero leftovers', async () => {
    const t = token();
    await using sup = new Supervisor({ name: `shut-${process.pid}` });
    const script = `for i in 1 2 3 4 5 6 7 8 9; do setsid sleep ${t} & done; exec sleep ${t}`;
    for (let i = 0; i < 100; i++) sup.spawn('bash', ['-c', script], { stdio: 'ignore' });
    await waitForLive(t, 1000, 'sleep', 20_000);
    const reports = await sup.shutdown({ grace: 2000 });
    expect(reports).toHaveLength(100);
    expect(reports.every((r) => r.reason === 'shutdown' && r.leftovers.length === 0 && r.signaled === 10)).toBe(true);
    await until(() => liveWith(t).length === 0, 2000);
    expect(liveWith(t)).toEqual([]);
    expect(() => sup.spawn('true')).toThrow(expect.objectContaining({ code: 'ERR_PROCTREE_SUPERVISOR_CLOSED' }));
  });

  it("shutdown() signals many small trees from proctree's passes thread, not in the loop's slices", () => {
    // Each tree is far below the size whose pass leaves the loop on its own:
    // only the group stop sends them there, so the thread exists afterwards
    // only if it did. In a process of its own, where nothing started it before.
    const t = token();
    const out = inFreshNode<{ before: boolean; after: boolean; clean: boolean }>(`
      const threads = () => fs.readdirSync('/proc/self/task').map((id) => {
        try { return fs.readFileSync('/proc/self/task/' + id + '/comm', 'utf8').trim(); } catch { return ''; }
      });
      (async () => {
        const sup = new proctree.Supervisor({ name: 'passes-' + process.pid });
        const calls = Array.from({ length: 8 }, () => sup.spawn('sh', ['-c', 'sleep ${t} & sleep ${t} & wait'], { stdio: 'ignore' }));
        await Promise.all(calls.map((c) => new Promise((resolve) => c.once('spawn', resolve))));
        const before = threads().includes('proctree-pass');
        const reports = await sup.shutdown({ grace: 2000 });
        console.log(JSON.stringify({ before, after: threads().includes('proctree-pass'),
          clean: reports.length === 8 && reports.every((r) => r.verified === 'cgroup.events' && r.leftovers.length === 0) }));
      })();`);
    expect(out).toEqual({ before: false, after: true, clean: true });
    expect(liveWith(t)).toEqual([]);
  });

  it('queued calls never start after shutdown; later spawns fail clearly', async () => {
    const t = token();
    await using sup = new Supervisor({ name: `queue-${process.pid}`, maxConcurrent: 1 });
    const first = sup.spawn('sleep', [t], { stdio: 'ignore' });
    first.on('error', () => {});
    const queued = sup.run('sleep', [t]).catch((err: unknown) => err);
    await waitForLive(t, 1);
    expect(sup.calls.size).toBe(2);
    const reports = await sup.shutdown();
    expect(reports).toHaveLength(1);
    expect(await queued).toMatchObject({ code: 'ERR_PROCTREE_SUPERVISOR_CLOSED' });
    await expect(sup.run('true')).rejects.toMatchObject({ code: 'ERR_PROCTREE_SUPERVISOR_CLOSED' });
    expect(liveWith(t)).toEqual([]);
  });

  it('await using: leaving the scope shuts it down', async () => {
    const t = token();
    let call;
    {
      await using sup = new Supervisor({ name: `dispose-${process.pid}` });
      call = sup.spawn('bash', ['-c', `setsid sleep ${t} & sleep ${t}`], { stdio: 'ignore' });
      await waitForLive(t, 2, 'sleep');
    }
    expect(liveWith(t)).toEqual([]);
    expect(call.exitCode === null && call.signalCode === 'SIGTERM').toBe(true);
  });

  it('rejects duplicate and malformed names', async () => {
    await using a = new Supervisor({ name: `dup-${process.pid}` });
    expect(() => new Supervisor({ name: `dup-${process.pid}` })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => new Supervisor({ name: '../escape' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => new Supervisor({ maxConcurrent: 0 })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    await a.shutdown();
  });

  it("a worker's calls end with the worker; the main thread's call runs on", async () => {
    const t = token();
    await using main = new Supervisor({ name: `main-${process.pid}` });
    const mine = main.spawn('sleep', [`${t}1`], { stdio: 'ignore' });
    const dist = path.resolve(__dirname, '../dist/cjs/index.js');
    const worker = new Worker(
      `const { spawn } = require(${JSON.stringify(dist)});
       const { parentPort } = require('node:worker_threads');
       const c = spawn('bash', ['-c', 'setsid sleep ${t}2 & exec sleep ${t}2'], { stdio: 'ignore' });
       const wait = setInterval(() => { if (c.members().length === 2) { clearInterval(wait); parentPort.postMessage(c.cgroup); } }, 10);`,
      { eval: true },
    );
    const workerCgroup = await new Promise<string>((resolve) => worker.once('message', resolve));
    expect(workerCgroup).toContain(`-w${worker.threadId}/`);
    // Two members may still be bash and setsid, a moment before they exec sleep.
    expect(await waitForLive(`${t}2`, 2, 'sleep')).toHaveLength(2);
    await worker.terminate();
    expect(liveWith(`${t}2`)).toEqual([]);
    expect(fs.existsSync(workerCgroup)).toBe(false);
    expect(mine.members()).toHaveLength(1);
    await main.shutdown();
  });
});

describe("the report of a ladder that found nothing says why it was asked for", () => {
  it.each(['subreaper', 'pidns'] as const)('%s: a shutdown while the start is pending, and the start fails', async (confinement) => {
    const sup = supervisor();
    const call = sup.spawn(`/nonexistent-${token()}`, [], { confinement, stdio: 'ignore' });
    call.on('error', () => {});
    // The shim has not confirmed the start yet: the ladder is asked for first.
    expect(call.pid).toBeUndefined();
    const [report] = await sup.shutdown();
    expect(report.reason).toBe('shutdown');
    expect(report.leftovers).toEqual([]);
  });
});
