// Output kept by bytes is bounded by bytes: a command that writes one byte
// per write() hands the harness one chunk per byte, and a ring or a
// collector that kept each chunk as its own Buffer held an object (and a
// reference to a slab) per byte — hundreds of MiB for a "1 MiB" ring. The
// bytes are copied into blocks instead. Measured in harness processes of
// their own (node --expose-gc): the heap and external memory after a full
// gc, before and after.
import { spawnSync } from 'node:child_process';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '..');
const dist = path.join(root, 'dist', 'cjs');
const MiB = 1024 * 1024;

interface Measured {
  growth: number;
  [k: string]: unknown;
}

/** Runs `body` (CommonJS, async) in a node --expose-gc of its own; `measure()` there says the memory held now. */
function harness(body: string): Measured {
  const script = `
    const measure = () => { global.gc(); global.gc(); const m = process.memoryUsage(); return m.heapUsed + m.external; };
    (async () => { ${body} })().then((out) => console.log(JSON.stringify(out)), (e) => { console.log(JSON.stringify({ error: String(e && e.stack || e) })); });
  `;
  const r = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 120_000 });
  const line = r.stdout.trim().split('\n').pop() ?? '';
  if (!line.startsWith('{')) throw new Error(`harness failed (${r.status ?? r.signal}): ${r.stdout}\n${r.stderr}`);
  const out = JSON.parse(line) as Measured & { error?: string };
  if (out.error) throw new Error(out.error);
  return out;
}

describe('output bounded by bytes, however it was cut into writes', () => {
  it('a 1 MiB ring and 1 MiB collectors fed two million one-byte chunks hold about 1 MiB each', () => {
    const out = harness(`
      const { ByteTail, OutputCollector } = require(${JSON.stringify(path.join(dist, 'output.js'))});
      const before = measure();
      const ring = new ByteTail(${MiB});
      const both = new OutputCollector(${MiB}, 'both');
      const head = new OutputCollector(${MiB}, 'head');
      const tail = new OutputCollector(${MiB}, 'tail');
      for (let i = 0; i < 2000000; i++) {
        // One Buffer per write, as a pipe read of one byte gives.
        const chunk = Buffer.from([97 + (i % 26)]);
        ring.write(chunk);
        both.write(chunk);
        head.write(chunk);
        tail.write(chunk);
      }
      const growth = measure() - before;
      const last = ring.slice(ring.total - 3).toString();
      const k = both.kept(true);
      return { growth, total: ring.total, size: ring.size, last, head: k.head.length, tail: k.tail.length, omitted: k.omitted,
        headOnly: head.kept(false).head.length, tailOnly: tail.kept(false).tail.length };
    `);
    // What the bytes themselves take is 4 MiB (four stores of 1 MiB); the bound is twice that.
    expect(out.growth).toBeLessThanOrEqual(2 * 4 * MiB);
    expect(out).toMatchObject({ total: 2_000_000, size: MiB, head: MiB / 2, tail: MiB / 2, omitted: 2_000_000 - MiB, headOnly: MiB, tailOnly: MiB });
    // The ring holds the stream's last bytes, in order.
    const last = [1_999_997, 1_999_998, 1_999_999].map((i) => String.fromCharCode(97 + (i % 26))).join('');
    expect(out.last).toBe(last);
  });

  it('a job writing three million single bytes: its 2 MiB ring costs the harness at most 4 MiB', () => {
    // (What the harness holds besides the ring: the 1 MiB a call keeps of
    // each stream for its result until that is read, and the job's records.)
    const out = harness(`
      const { Supervisor } = require(${JSON.stringify(path.join(dist, 'index.js'))});
      const sup = new Supervisor({ name: 'bounded-' + process.pid });
      // Warm up: the addon, its thread and a first call are not the ring.
      await sup.run('true');
      const before = measure();
      const py = 'import os\\nfor _ in range(3000000): os.write(1, b"x")';
      const call = sup.spawn('python3', ['-c', py], { background: true, jobBuffer: ${2 * MiB}, stdio: ['ignore', 'pipe', 'pipe'] });
      const job = sup.job(call.jobId);
      await job.wait();
      const info = job.info();
      const growth = measure() - before;
      const tail = job.tail(4).text;
      await sup.shutdown({ grace: 0 });
      return { growth, total: info.output.total, capacity: info.output.capacity, tail };
    `);
    expect(out).toMatchObject({ total: 3_000_000, capacity: 2 * MiB, tail: 'xxxx' });
    expect(out.growth).toBeLessThanOrEqual(2 * 2 * MiB);
  });
});
