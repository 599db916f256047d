// run() reads its stdout and stderr in the addon, without a stream object
// (native/loop/streams.h), and gives stdin /dev/null when there is no
// input. What must not change: no byte lost or reordered (50 MB, binary,
// both streams at once, a listener slower than the writer, output written
// after the main process exited), 'close' only once the tree is empty and
// both pipes ended, a call killed mid-output still settles with what it
// wrote, and no descriptor is left behind.
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Worker } from 'node:worker_threads';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { run } from '../dist/cjs/index.js';
import { killCgroup, liveWith, openFds, token, waitUntil, leafReleased } from './helpers';

let tmp = '';
let blob: Buffer = Buffer.alloc(0);
let blobPath = '';
const cgroups: string[] = [];

beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-run-native-'));
  // 5 MiB of random bytes, every byte value, no text structure: any lost,
  // doubled or swapped chunk changes the digest.
  blob = crypto.randomBytes(5 * 1024 * 1024);
  blobPath = path.join(tmp, 'blob');
  fs.writeFileSync(blobPath, blob);
});

afterAll(() => {
  for (const c of cgroups) killCgroup(c);
  fs.rmSync(tmp, { recursive: true, force: true });
});

const sha = (b: Buffer): string => crypto.createHash('sha256').update(b).digest('hex');

describe('run() output read by the addon', () => {
  it('50 MB through head -c, exact', async () => {
    const r = await run('sh', ['-c', 'head -c 50000000 /dev/zero | tr "\\0" "z"'], { encoding: 'buffer' });
    expect(r.exitCode).toBe(0);
    expect(r.stdout.length).toBe(50_000_000);
    expect(r.stdoutOmitted).toBe(0);
    expect(r.stdout.every((b) => b === 0x7a)).toBe(true);
  });

  it('binary data on both streams at once, 10 × 5 MiB each, byte-exact', async () => {
    const script = `for i in 1 2 3 4 5 6 7 8 9 10; do cat ${blobPath}; done & for i in 1 2 3 4 5 6 7 8 9 10; do cat ${blobPath} >&2; done; wait`;
    const r = await run('sh', ['-c', script], { encoding: 'buffer', maxBuffer: 128 << 20 });
    expect(r.exitCode).toBe(0);
    const expected = sha(Buffer.concat(Array.from({ length: 10 }, () => blob)));
    expect(r.stdout.length).toBe(blob.length * 10);
    expect(r.stderr.length).toBe(blob.length * 10);
    expect(sha(r.stdout)).toBe(expected);
    expect(sha(r.stderr)).toBe(expected);
  });

  it('interleaved stdout and stderr: each stream in order, `all` has every line of both in per-stream order', async () => {
    const script = 'i=0; while [ $i -lt 2000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done';
    const r = await run('sh', ['-c', script], { all: true });
    const outs = Array.from({ length: 2000 }, (_, i) => `out${i}`);
    const errs = Array.from({ length: 2000 }, (_, i) => `err${i}`);
    expect(r.stdout).toBe(outs.map((l) => `${l}\n`).join(''));
    expect(r.stderr).toBe(errs.map((l) => `${l}\n`).join(''));
    const all = String(r.all).split('\n').filter(Boolean);
    expect(all).toHaveLength(4000);
    expect(all.filter((l) => l.startsWith('out'))).toEqual(outs);
    expect(all.filter((l) => l.startsWith('err'))).toEqual(errs);
  });

  it('a listener slower than the writer holds the writer back; nothing is lost', async () => {
    // Two calls, four pipes: more chunks are read per turn than one turn's
    // delivery budget takes (3 ms of work per chunk), so some pipes have a
    // chunk still queued when they are ready again and stop being read
    // until it is delivered.
    const seen = [0, 0];
    const one = (k: number): ReturnType<typeof run> =>
      run('sh', ['-c', `cat ${blobPath} & cat ${blobPath} >&2; wait`], {
        encoding: 'buffer',
        onOutput: (chunk: Buffer) => {
          seen[k] += chunk.length;
          const until = performance.now() + 3;
          while (performance.now() < until);
        },
      });
    const results = await Promise.all([one(0), one(1)]);
    for (const [k, r] of results.entries()) {
      expect(sha(r.stdout)).toBe(sha(blob));
      expect(sha(r.stderr)).toBe(sha(blob));
      expect(seen[k]).toBe(blob.length * 2);
    }
  });

  it('output a grandchild writes after the main process exited (leftovers: wait)', async () => {
    const r = await run('sh', ['-c', '(sleep 0.3; echo late; echo late-err >&2) & echo early'], { leftovers: 'wait' });
    expect(r.stdout).toBe('early\nlate\n');
    expect(r.stderr).toBe('late-err\n');
  });

  it("a background process that keeps the pipes open is stopped (leftovers: 'kill'); the result has what came first", async () => {
    const t = token();
    const started = Date.now();
    const r = await run('sh', ['-c', `echo before; echo before-err >&2; (exec sleep ${t}) & exit 0`]);
    expect(Date.now() - started).toBeLessThan(5000);
    expect(r.stdout).toBe('before\n');
    expect(r.stderr).toBe('before-err\n');
    expect(r.cleanup?.reason).toBe('leftovers');
    // The kernel's word: the sleeper is gone and so is the call's cgroup.
    expect(liveWith(t, 'sleep')).toEqual([]);
    if (r.cgroup) expect(leafReleased(r.cgroup)).toBe(true);
  });

  it('pipes at EOF do not settle the call while the tree still runs (leftovers: wait)', async () => {
    // A sleep of 1.x seconds whose unique duration finds it in /proc.
    // 3 s: the sleeper must outlive the 200 ms window below however slowly
    // a loaded machine gets there.
    const t = token(3);
    // The background process closes its copies of the pipes at once: both
    // pipes reach EOF when the shell exits, long before the tree is empty.
    const p = run('sh', ['-c', `(exec >/dev/null 2>&1; exec sleep ${t}) & echo hi`], { leftovers: 'wait' });
    let settled = false;
    void p.then(() => (settled = true));
    await waitUntil(() => liveWith(t, 'sleep').length === 1, 2000);
    await new Promise((r) => setTimeout(r, 200));
    // The sleeper is alive (the kernel says so) and the result has not come.
    expect(liveWith(t, 'sleep')).toHaveLength(1);
    expect(settled).toBe(false);
    const r = await p;
    expect(r.stdout).toBe('hi\n');
    expect(liveWith(t, 'sleep')).toEqual([]);
    if (r.cgroup) expect(leafReleased(r.cgroup)).toBe(true);
  });

  it('a call killed mid-output (timeout) settles with what it wrote, whole lines of it', async () => {
    // 2 s: sh must have written two lines before the timeout, which a loaded
    // machine can delay past a few hundred ms; maxBuffer caps what it keeps.
    const r = await run('sh', ['-c', 'while :; do echo 0123456789; done'], { timeout: 2000, maxBuffer: 1 << 20, keep: 'head' });
    if (r.cgroup) cgroups.push(r.cgroup);
    expect(r.timedOut).toBe(true);
    expect(r.stdout.length).toBeGreaterThan(0);
    // Every byte that came is a piece of the stream as written.
    expect(String(r.stdout).slice(0, 22)).toBe('0123456789\n0123456789\n');
    if (r.cgroup) expect(leafReleased(r.cgroup)).toBe(true);
  });

  it('an abort mid-output rejects nothing and leaves no process', async () => {
    const t = token();
    const ac = new AbortController();
    // Aborted at the first output, not after a fixed time: on a loaded
    // machine sh may not have written a line by then.
    const p = run('sh', ['-c', `(exec sleep ${t}) & while :; do echo y; done`], { signal: ac.signal, onOutput: () => ac.abort() });
    const r = await p;
    expect(r.aborted).toBe(true);
    expect(String(r.stdout)).toMatch(/^(y\n)+/);
    expect(liveWith(t, 'sleep')).toEqual([]);
  });

  it('stdin is /dev/null without input, a pipe with input', async () => {
    const none = await run('sh', ['-c', 'readlink /proc/self/fd/0; cat']);
    expect(none.stdout).toBe('/dev/null\n');
    const given = await run('sh', ['-c', 'readlink /proc/self/fd/0 | cut -c1-5; cat'], { input: 'typed' });
    expect(given.stdout).toBe('pipe:\ntyped');
  });

  it('no descriptor left after 200 calls (with and without output)', async () => {
    // One call first: whatever the library opens once (/dev/null, epoll) is open now.
    await run('sh', ['-c', 'echo warm']);
    const before = openFds();
    for (let i = 0; i < 200; i++) {
      if (i % 2 === 0) await run('/bin/true');
      else await run('sh', ['-c', 'echo out; echo err >&2']);
    }
    // By number, not counted (see below).
    await waitUntil(() => openFds(before).size === 0, 5000);
    expect([...openFds(before)]).toEqual([]);
  });

  it("each tier reads the pipes to their end before 'close'", async () => {
    for (const confinement of ['cgroup', 'pidns', 'subreaper', 'pgroup'] as const) {
      const r = await run('sh', ['-c', `cat ${blobPath}; (sleep 0.1; echo tail >&2) & echo x >&2`], {
        encoding: 'buffer',
        confinement,
        leftovers: 'wait',
      });
      expect(sha(r.stdout), confinement).toBe(sha(blob));
      expect(String(r.stderr), confinement).toBe('x\ntail\n');
    }
  });

  it('a worker ended in the middle of a run() leaves no descriptor and no process', async () => {
    const t = token();
    const dist = path.resolve(__dirname, '../dist/cjs/index.js');
    const before = openFds();
    const worker = new Worker(
      `const { run } = require(${JSON.stringify(dist)});
       const { parentPort } = require('node:worker_threads');
       let told = false;
       run('sh', ['-c', '(exec sleep ${t}) & while :; do echo y; echo n >&2; done'], {
         onOutput: () => { if (!told) { told = true; parentPort.postMessage('writing'); } },
       });`,
      { eval: true },
    );
    await new Promise((resolve) => worker.once('message', resolve));
    await worker.terminate();
    expect(liveWith(t, 'sleep')).toEqual([]);
    // Compared by number, not counted: earlier tests' descriptors closing
    // meanwhile (a loaded machine is late with them) must not hide a leak.
    await waitUntil(() => openFds(before).size === 0, 5000);
    expect([...openFds(before)]).toEqual([]);
  });
});
