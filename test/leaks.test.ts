// Hundreds of calls leave nothing: no zombie, no descriptor, no cgroup, and
// Node's own child_process keeps working beside us (we never reap what is not ours).
import { spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

import { run, spawn } from '../dist/cjs/index.js';
import { inFreshNode, leafReleased, openFdCount, waitUntil, zombieChildren } from './helpers';

describe('resources', () => {
  it('500 calls leave no zombie, fd or cgroup', async () => {
    const first = await run('true');
    const subtree = path.dirname(first.cgroup);
    const fdsBefore = openFdCount();
    for (let batch = 0; batch < 50; batch++) {
      await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          i % 3 === 0
            ? run('sh', ['-c', 'setsid sleep 5 & echo x'], { grace: 100 })
            : i % 3 === 1
              ? run('proctree-no-such-command-xyz').catch(() => null)
              : run('true'),
        ),
      );
    }
    // Socket handles finish closing and the last children are reaped a
    // moment later: wait for it (far longer than it takes), then check.
    await waitUntil(() => zombieChildren().length === 0, 10_000);
    expect(zombieChildren()).toEqual([]);
    // Every leaf left is one kept for the next call: empty, unfrozen, nothing
    // below it (leafReleased); the subtree, kept leaves included, goes a
    // moment after its last call, and with it the directory descriptors the
    // kept leaves hold.
    const leaves = fs.existsSync(subtree) ? fs.readdirSync(subtree).filter((n) => /^c\d+$/.test(n)) : [];
    for (const leaf of leaves) expect(leafReleased(path.join(subtree, leaf))).toBe(true);
    await waitUntil(() => !fs.existsSync(subtree), 5000);
    expect(fs.existsSync(subtree)).toBe(false);
    expect(openFdCount()).toBeLessThanOrEqual(fdsBefore);
  });

  it("a call keeps its leaf's descriptors while few calls live, and none once many do", async () => {
    // What this process holds open inside a leaf, read from /proc/self/fd.
    const heldIn = (leaf: string): number =>
      fs.readdirSync('/proc/self/fd').filter((fd) => {
        try {
          const target = fs.readlinkSync(`/proc/self/fd/${fd}`);
          return target === leaf || target.startsWith(`${leaf}/`);
        } catch {
          return false; // closed since the listing
        }
      }).length;
    const calls: ReturnType<typeof spawn>[] = [];
    const start = async (): Promise<ReturnType<typeof spawn>> => {
      const c = spawn('sleep', ['30'], { stdio: 'ignore', grace: 100 });
      await new Promise((resolve, reject) => c.once('spawn', resolve).once('error', reject));
      calls.push(c);
      return c;
    };
    try {
      // One call: its end reads its leaf through the descriptors the clone
      // used (the directory, cgroup.events), not by reopening its path.
      const one = await start();
      expect(heldIn(one.cgroup as string)).toBeGreaterThanOrEqual(2);
      // Forty: past the bound, no live call holds anything of its leaf.
      while (calls.length < 40) await start();
      for (const c of calls) expect(heldIn(c.cgroup as string)).toBe(0);
    } finally {
      await Promise.all(calls.map((c) => c.terminate()));
    }
  });

  it("does not steal the exits of Node's own child_process children", async () => {
    const codes = await Promise.all(
      Array.from({ length: 20 }, (_, i) => {
        if (i % 2 === 0) return run('sh', ['-c', `exit ${i}`]).then((r) => r.exitCode);
        return new Promise<number | null>((resolve) => {
          cpSpawn('sh', ['-c', `exit ${i}`]).on('exit', (code) => resolve(code));
        });
      }),
    );
    expect(codes).toEqual(Array.from({ length: 20 }, (_, i) => i));
  });

  it('the main process is reaped as soon as it exits, even while its tree lives on', async () => {
    const call = spawn('bash', ['-c', 'setsid sleep 0.5 & exit 0'], { stdio: 'ignore', leftovers: 'wait' });
    await new Promise((r) => call.on('exit', r));
    expect(zombieChildren()).toEqual([]);
    await call.done;
  });

  // The kernel grows a process's table of descriptors by doubling, and with
  // more than one thread each growth waits for an RCU grace period (5-18 ms
  // here) on the thread that wanted the descriptor: the JavaScript thread at
  // its 257th, or a pass holding a large tree's pidfds, once per doubling.
  // proctree grows the table ahead of its own use, on a thread of its own.
  const tableSize = (limit?: number): { before: number; after: number } =>
    inFreshNode(
      `const size = () => Number(/FDSize:\\s*(\\d+)/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]);
      (async () => {
        const before = size();
        await proctree.run('true');
        const deadline = Date.now() + 20000;
        while (size() < ${Math.min(limit ?? 2048, 2048)} && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
        await proctree.run('true');
        console.log(JSON.stringify({ before, after: size() }));
      })();`,
      limit,
    );

  it('grows the descriptor table ahead of its own descriptors, within RLIMIT_NOFILE', () => {
    const fresh = tableSize();
    expect(fresh.before).toBeLessThan(2048); // Node starts with room for 256
    expect(fresh.after).toBeGreaterThanOrEqual(2048);
    // A low limit ends the table there (the kernel's bound), and calls go on
    // as before: both runs complete, and nothing retries the growth per call.
    const low = tableSize(300);
    expect(low.after).toBeLessThanOrEqual(512);
  });
});
