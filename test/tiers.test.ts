// The escape suite of test/escape.test.ts, run in every confinement tier with
// the outcome each tier promises (docs/tiers.md):
//   cgroup, pidns — zero survivors in every case;
//   subreaper     — zero survivors whenever the escapee stays a descendant of
//                   the shim, which is every case here (setsid does not change
//                   who reaps an orphan);
//   pgroup        — a descendant that leaves the session is a known miss: it
//                   survives, is not in leftovers (the tier cannot see it) and
//                   verified is 'none'. The test then kills it itself, by the
//                   pids its own token scan found.
// And the cgroup tier sealed (`seal: true`, where it can be had): the same
// outcomes as unsealed, from inside its own namespaces.
// Checked from the kernel's side: a /proc scan for each test's unique token.
// And what Node promises in every tier: 'spawn' before any output.
import { spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';

import { afterAll, describe, expect, it } from 'vitest';

import { capabilities, type Confinement, spawn, type ToolCall } from '../dist/cjs/index.js';
import { goFile, goWhenSleeping, killLiveWith, killCgroup, killTokens, liveWith, token, waitForLive } from './helpers';

const tiers: Array<{ label: string; tier: Confinement; seal: boolean }> = [
  ...(['cgroup', 'pidns', 'subreaper', 'pgroup'] as const).map((tier) => ({ label: tier, tier, seal: false })),
  ...(capabilities().seal.available ? [{ label: 'cgroup, sealed', tier: 'cgroup' as const, seal: true }] : []),
];
const calls: ToolCall[] = [];
const tokens: string[] = [];

function track(call: ToolCall): ToolCall {
  calls.push(call);
  call.on('error', () => {});
  return call;
}

afterAll(() => {
  for (const c of calls) killCgroup(c.cgroup);
  killTokens(tokens);
});

const verified: Record<string, string> = { cgroup: 'cgroup.events', pidns: 'pidns', subreaper: 'subreaper', pgroup: 'none' };

function start(tier: Confinement, seal: boolean, script: string, t: string, extra: object = {}): ToolCall {
  tokens.push(t);
  const call = track(spawn('bash', ['-c', script], { stdio: 'ignore', confinement: tier, seal, ...extra }));
  expect(call.confinement).toBe(tier);
  call.once('spawn', () => expect(call.sealed).toBe(seal));
  return call;
}

/** What a known miss left behind: its sleeps, found by the test's /proc scan, killed by pid; how many. */
const reapMisses = (t: string): number => killLiveWith(t, 'sleep');

describe.each(tiers)('confinement $label', ({ tier, seal }) => {
  const escapeProof = tier !== 'pgroup';

  it('double-fork + setsid', async () => {
    const t = token();
    const call = start(tier, seal, `(setsid sleep ${t} &) ; sleep ${t}`, t);
    expect((await waitForLive(t, 2, 'sleep')).length).toBe(2);
    const report = await call.terminate({ grace: 1000 });
    await call.done;
    expect(report.confinement).toBe(tier);
    expect(report.verified).toBe(verified[tier]);
    expect(report.leftovers).toEqual([]);
    if (escapeProof) {
      expect(report.signaled).toBe(2);
      expect(report.escaped).toBe(1);
      expect(liveWith(t)).toEqual([]);
    } else {
      // Known miss: only the main sleep was visible and signalled.
      expect(report.signaled).toBe(1);
      expect(reapMisses(t)).toBe(1);
    }
  });

  it('setpgid into a group of its own', async () => {
    const t = token();
    const py = `import os; os.setpgid(0, 0); os.execvp("sleep", ["sleep", "${t}"])`;
    const call = start(tier, seal, `python3 -c '${py}' & sleep ${t}`, t);
    await waitForLive(t, 2, 'sleep');
    const report = await call.terminate({ grace: 1000 });
    await call.done;
    // Still in the session: even pgroup sees it (by its session id).
    expect(report.escaped).toBe(1);
    expect(report.leftovers).toEqual([]);
    expect(liveWith(t)).toEqual([]);
  });

  it('nohup … & disown', async () => {
    const t = token();
    const call = start(tier, seal, `nohup sleep ${t} >/dev/null 2>&1 & disown; sleep ${t}`, t);
    await waitForLive(t, 2, 'sleep');
    const report = await call.terminate({ grace: 1000 });
    await call.done;
    expect(report.signaled).toBe(2);
    expect(liveWith(t)).toEqual([]);
  });

  it('SIGTERM ignored: killed once grace runs out', async () => {
    const t = token();
    const call = start(tier, seal, `trap '' TERM; sleep ${t} & setsid sleep ${t} & wait`, t);
    await waitForLive(t, 2, 'sleep');
    const grace = 400;
    const report = await call.terminate({ grace });
    await call.done;
    expect(report.durationMs).toBeGreaterThanOrEqual(grace);
    expect(call.signalCode).toBe('SIGKILL');
    if (escapeProof) {
      expect(report.signaled).toBe(3);
      expect(report.killed).toBe(3);
      expect(liveWith(t)).toEqual([]);
    } else {
      expect(report.signaled).toBe(2);
      expect(report.killed).toBe(2);
      expect(reapMisses(t)).toBe(1);
    }
  });

  it('a descendant that keeps forking during the ladder', async () => {
    const t = token(30);
    // Bounded: at most 3000 forks, one every 2 ms.
    const call = start(tier, seal, `for i in $(seq 1 3000); do (setsid sleep ${t} &); sleep 0.002; done`, t);
    await waitForLive(t, 20, 'sleep');
    const report = await call.terminate({ grace: 300 });
    await call.done;
    if (escapeProof) {
      expect(report.signaled).toBeGreaterThan(20);
      expect(report.leftovers).toEqual([]);
      expect(liveWith(t)).toEqual([]);
    } else {
      // Every setsid'd sleeper is a miss; none is reported, none was signalled.
      expect(report.leftovers).toEqual([]);
      expect(reapMisses(t)).toBeGreaterThanOrEqual(20);
    }
  });

  it('main exits leaving a daemon', async () => {
    const t = token();
    // The main exits once this test has seen the daemon run sleep (setsid(1)
    // execs it after setsid()) and made the file the main waits for, not
    // after a fixed 0.2 s: a daemon slower than that was still in the group
    // at the exit (pgroup: stopped by the leftovers ladder), or not yet sleep
    // when the ladder of an escape-proof tier stopped it.
    const call = start(tier, seal, `(setsid sleep ${t} &); while [ ! -e ${goFile(t)} ]; do sleep 0.01; done; exit 0`, t, { grace: 500 });
    const result = await goWhenSleeping(t, call.done);
    expect(result.exitCode).toBe(0);
    if (escapeProof) {
      expect(result.cleanup?.reason).toBe('leftovers');
      expect(result.cleanup?.verified).toBe(verified[tier]);
      expect(result.cleanup?.signaled).toBe(1);
      expect(liveWith(t)).toEqual([]);
    } else {
      // The daemon left the session: the call looks empty to this tier.
      expect(result.cleanup).toBeNull();
      expect(reapMisses(t)).toBe(1);
    }
  });

  // A shim's tier reports the command's start (and pid) after the command
  // may have written: the output waits for 'spawn'.
  it("emits 'spawn' before any output, as Node does, on pipes and on a terminal, and loses none of it", async () => {
    for (const pty of [false, true]) {
      const batch = Array.from({ length: 20 }, () => track(spawn('sh', ['-c', 'echo out; echo err >&2'], { confinement: tier, seal, pty })));
      const seen = await Promise.all(
        batch.map(
          (call) =>
            new Promise<{ early: number; out: string; pid: number | undefined }>((resolve) => {
              let spawned = false;
              let early = 0;
              let out = '';
              let pid: number | undefined;
              call.on('spawn', () => {
                spawned = true;
                pid = call.pid;
              });
              for (const stream of pty ? [call.pty] : [call.stdout, call.stderr]) {
                stream?.on('data', (d: Buffer) => {
                  if (!spawned) early += 1;
                  out += d.toString();
                });
              }
              call.on('close', () => resolve({ early, out, pid }));
            }),
        ),
      );
      for (const r of seen) expect(r).toMatchObject({ early: 0, pid: expect.any(Number) });
      for (const r of seen) expect(r.out).toMatch(/out[\s\S]*err|err[\s\S]*out/);
    }
  });

  it('spawn errors surface as they do in the cgroup tier', async () => {
    const call = track(spawn('/nonexistent/proctree-no-such-command', [], { confinement: tier, seal }));
    const err = await new Promise<Error & { code?: string; syscall?: string }>((resolve) => call.once('error', resolve));
    expect(err.code).toBe('ENOENT');
    expect(call.pid).toBeUndefined();
  });
});

describe('the harness stays an ordinary parent', () => {
  it('is not a subreaper: orphans of its own child_process children still go elsewhere', async () => {
    const t = token();
    tokens.push(t);
    const call = track(spawn('sleep', [t], { confinement: 'subreaper', stdio: 'ignore' }));
    await waitForLive(t, 1, 'sleep');
    const t2 = token();
    tokens.push(t2);
    const child = cpSpawn('bash', ['-c', `(sleep ${t2} &); exit 0`], { stdio: 'ignore' });
    await new Promise((r) => child.once('exit', r));
    const [orphan] = await waitForLive(t2, 1, 'sleep');
    const stat = fs.readFileSync(`/proc/${orphan}/stat`, 'utf8');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    expect(ppid).not.toBe(process.pid);
    process.kill(orphan, 'SIGKILL');
    await call.terminate({ grace: 100 });
  });

  it('exit codes and stdout pass through the shims', async () => {
    for (const tier of ['pidns', 'subreaper', 'pgroup'] as const) {
      const call = track(spawn('sh', ['-c', 'echo out; exit 7'], { confinement: tier }));
      const res = await call.done;
      expect(res.exitCode).toBe(7);
      expect(res.stdout).toBe('out\n');
      expect(res.confinement).toBe(tier);
      expect(res.cgroup).toBe('');
    }
  });
});
