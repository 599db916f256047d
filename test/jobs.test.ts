// Background jobs as an agent uses them: a command leaves a dev server behind
// (leftovers: 'keep') or starts one with background: true; the harness gets
// its answer at once, lists what still runs, reads the server's recent
// output, and stops it later — and nothing outlives the harness. Outcomes are
// read from the kernel: cgroup membership, /proc, a real HTTP request.
import { spawn as cpSpawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { type Confinement, job, jobs, run, spawn, Supervisor, type ToolCall } from '../dist/cjs/index.js';
import { cgroupExists, cgroupMembers, httpGet as get, killCgroup, killTokens, liveWith, running, serverDir as tokenDir, token, waitForLive, waitUntil, leafReleased } from './helpers';
import { fileSupervisors } from './supervisors';

const root = path.resolve(__dirname, '..');
const cgroups: string[] = [];
const calls: ToolCall[] = [];
const tokens: string[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const c of cgroups) killCgroup(c);
  for (const c of calls) killCgroup(c.cgroup);
  killTokens(tokens);
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

const { supervisor } = fileSupervisors('jobs');

function serverDir(): { dir: string; needle: string } {
  const made = tokenDir('proctree-job');
  dirs.push(made.dir);
  tokens.push(made.needle);
  return made;
}

async function untilOutput(id: string, re: RegExp, sup?: Supervisor): Promise<RegExpExecArray> {
  const j = sup ? sup.job(id) : job(id);
  for (let i = 0; i < 500; i++) {
    const m = re.exec(j.read().text);
    if (m) return m;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`job ${id} never wrote ${re}: ${JSON.stringify(j.read().text)}`);
}

describe("leftovers: 'keep'", () => {
  it('a dev server behind `cmd &` answers after run() settled, is listed, readable, and stop() leaves nothing', async () => {
    const { dir, needle } = serverDir();
    const r = await run('bash', ['-c', `python3 -u -m http.server --bind 127.0.0.1 --directory ${dir} 0 & echo started`], {
      leftovers: 'keep',
    });
    cgroups.push(r.cgroup);
    // run() settled with the shell's own status and output; the server runs on.
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe('started\n');
    expect(r.cleanup).toBeNull();
    expect(r.jobId).toMatch(/^c\d+$/);
    expect(path.basename(r.cgroup)).toBe(r.jobId);
    expect(r.remaining.length).toBeGreaterThanOrEqual(1);
    // What remained when run() settled is in the job's cgroup (unless it
    // already exited: a launcher's helper). Members first, then who runs: a
    // process that exits between the two reads is not held against it.
    const remainingNow = cgroupMembers(r.cgroup);
    for (const p of r.remaining) if (!remainingNow.includes(p.pid)) expect(running(p.pid)).toBe(false);
    expect(r.usage.source).toBe('cgroup');

    const port = Number((await untilOutput(r.jobId as string, /Serving HTTP on 127\.0\.0\.1 port (\d+)/))[1]);
    // The kernel's view: the serving server is in the call's cgroup. (A
    // process that a launcher wrapper forked and that exited between the two
    // reads is not held against it.)
    const serverPids = await waitForLive(needle, 1);
    expect(serverPids.length).toBeGreaterThanOrEqual(1);
    const members = cgroupMembers(r.cgroup);
    for (const pid of serverPids) if (!members.includes(pid)) expect(running(pid)).toBe(false);

    const res = await get(port, 'hello.txt');
    expect(res).toEqual({ status: 200, body: 'hello from the job\n' });

    const listed = jobs().find((j) => j.id === r.jobId);
    expect(listed).toBeDefined();
    expect(listed?.state).toBe('running');
    expect(listed?.command).toContain('python3 -u -m http.server');
    expect(listed?.exitCode).toBe(0);
    expect(listed?.members).toBe(cgroupMembers(r.cgroup).length);
    expect(listed?.processes.map((p) => p.pid).sort()).toEqual(cgroupMembers(r.cgroup).sort());
    expect(listed?.startedAt).toBeLessThanOrEqual(Date.now());

    // The request the server logged (to stderr) is in its recent output.
    await untilOutput(r.jobId as string, /"GET \/hello\.txt HTTP\/1\.1" 200/);
    const tail = job(r.jobId as string).tail(200);
    expect(tail.text).toContain('GET /hello.txt');
    expect(tail.next).toBe(tail.total);

    // proctree ps reads the kernel, and shows the same id and command.
    const ps = spawnSync(process.execPath, [path.join(root, 'bin', 'proctree.js'), 'ps', '--json'], { encoding: 'utf8' });
    const entry = (JSON.parse(ps.stdout) as Array<{ id: string; cgroup: string; command: string }>).find((c) => c.cgroup === r.cgroup);
    expect(entry?.id).toBe(r.jobId);
    expect(entry?.command).toContain('http.server');

    const j = job(r.jobId as string);
    const report = await j.stop({ grace: 2000 });
    expect(report).toMatchObject({ reason: 'terminate', leftovers: [], verified: 'cgroup.events' });
    expect(report.signaled).toBeGreaterThanOrEqual(1);
    const final = await j.wait();
    expect(final.state).toBe('stopped');
    expect(final.members).toBe(0);
    expect(final.usage?.source).toBe('cgroup');
    expect(leafReleased(r.cgroup)).toBe(true);
    expect(liveWith(needle)).toEqual([]);
  });

  it('the harness dying (SIGKILL) kills the job it kept', async () => {
    const { dir, needle } = serverDir();
    const harness = cpSpawn(process.execPath, [path.join(root, 'test', 'fixtures', 'job-harness.cjs')], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, JOB_DIR: dir },
    });
    const harnessExited = new Promise<void>((resolve) => harness.once('exit', () => resolve()));
    try {
      const line = await new Promise<string>((resolve, reject) => {
        let out = '';
        harness.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.includes('\n')) resolve(out.split('\n')[0]);
        });
        harness.on('exit', (code) => reject(new Error(`harness exited with ${code}`)));
      });
      const info = JSON.parse(line) as { jobId: string; cgroup: string; port: number };
      cgroups.push(info.cgroup);
      expect((await get(info.port, 'hello.txt')).status).toBe(200);
      const pids = liveWith(needle);
      expect(pids.length).toBeGreaterThanOrEqual(1);
      for (const pid of pids) expect(cgroupMembers(info.cgroup)).toContain(pid);

      harness.kill('SIGKILL');
      await harnessExited;
      await waitUntil(() => liveWith(needle).length === 0, 2000);
      expect(liveWith(needle)).toEqual([]);
      await waitUntil(() => !cgroupExists(info.cgroup), 2000);
      expect(leafReleased(info.cgroup)).toBe(true);
    } finally {
      // A failed check must not leave the harness (and the job it keeps) running.
      if (harness.exitCode === null && harness.signalCode === null) {
        harness.kill('SIGKILL');
        await harnessExited;
      }
    }
  });

  it('with nothing left behind, run() is an ordinary run: no job', async () => {
    const r = await run('sh', ['-c', 'echo done'], { leftovers: 'keep' });
    cgroups.push(r.cgroup);
    expect(r).toMatchObject({ exitCode: 0, stdout: 'done\n', jobId: null, remaining: [] });
    expect(jobs().some((j) => j.cgroup === r.cgroup)).toBe(false);
    // The kernel's view: the call's cgroup is gone (no job holds it).
    expect(r.cgroup).not.toBe('');
    expect(leafReleased(r.cgroup)).toBe(true);
  });

  it('spawn(): the call stays open as a job; done settles at the exit, close when the job ends', async () => {
    const t = token();
    tokens.push(t);
    const call = spawn('bash', ['-c', `sleep ${t} & echo left`], { leftovers: 'keep' });
    cgroups.push(call.cgroup as string);
    const seen: string[] = [];
    call.on('leftover', () => seen.push(`leftover:${call.jobId}`));
    call.on('close', () => seen.push('close'));
    // Listened for from the start: 'close' may come before stop() resolves.
    const closed = new Promise((resolve) => call.once('close', resolve));
    const r = await call.done;
    expect(r.jobId).toBe(call.jobId);
    expect(seen).toEqual([`leftover:${call.jobId}`]);
    // One process: the fork of bash that becomes the sleep (it may not have exec'd yet).
    expect(r.remaining).toHaveLength(1);
    // Both empty would also be equal: the sleep must have been found first.
    const sleeps = await waitForLive(t, 1, 'sleep');
    expect(sleeps).toHaveLength(1);
    expect(cgroupMembers(call.cgroup as string)).toEqual(sleeps);
    expect(jobs().find((j) => j.id === call.jobId)?.processes.map((p) => p.cmdline)).toEqual([`sleep ${t}`]);
    const report = await job(call.jobId as string).stop();
    expect(report.leftovers).toEqual([]);
    await closed;
    expect(seen).toEqual([`leftover:${call.jobId}`, 'close']);
    expect(call.usage?.source).toBe('cgroup');
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(call.cgroup)).toBe(true);
  });

  it("timeout and idleTimeout bound the command, not the job it left", async () => {
    const t = token();
    tokens.push(t);
    // 3 s: on a loaded machine bash may take a while to fork and exit; the
    // bounds must not fire before it did.
    const r = await run('bash', ['-c', `sleep ${t} & echo left`], { leftovers: 'keep', timeout: 3000, idleTimeout: 3000 });
    cgroups.push(r.cgroup);
    // Past both bounds (what is checked is that nothing happens then).
    await new Promise((resolve) => setTimeout(resolve, 4000));
    // Past both bounds, the sleep still runs, in the job's cgroup.
    const alive = liveWith(t, 'sleep');
    expect(alive).toHaveLength(1);
    expect(cgroupMembers(r.cgroup)).toEqual(alive);
    expect(job(r.jobId as string).info().state).toBe('running');
    await job(r.jobId as string).stop();
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(r.cgroup)).toBe(true);
  });
});

describe('background: true', () => {
  it('run() settles at once with the job id; the job is stopped by id', async () => {
    const t = token();
    tokens.push(t);
    const r = await run('sleep', [t], { background: true });
    cgroups.push(r.cgroup);
    expect(r.jobId).toBe(path.basename(r.cgroup));
    expect(r.exitCode).toBeNull();
    const sleeps = await waitForLive(t, 1);
    expect(sleeps).toHaveLength(1);
    expect(cgroupMembers(r.cgroup)).toEqual(sleeps);
    const info = jobs().find((j) => j.id === r.jobId);
    expect(info).toMatchObject({ state: 'running', members: 1, pid: r.pid, command: `sleep ${t}` });
    const report = await job(r.jobId as string).stop({ grace: 500 });
    expect(report.signaled).toBe(1);
    expect((await job(r.jobId as string).wait()).state).toBe('stopped');
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(r.cgroup)).toBe(true);
  });

  it('timeout bounds a background job for its whole life, even past the exit of its main process', async () => {
    const t = token();
    tokens.push(t);
    // 3 s: bash must have forked and exited (exitCode 0) and the test seen
    // the sleep before the timeout stops the job; a loaded machine can take
    // longer than 500 ms for that.
    const r = await run('bash', ['-c', `sleep ${t} & exit 0`], { background: true, leftovers: 'keep', timeout: 3000 });
    cgroups.push(r.cgroup);
    expect(await waitForLive(t, 1, 'sleep')).toHaveLength(1);
    const final = await job(r.jobId as string).wait();
    expect(final.state).toBe('stopped');
    expect(final.exitCode).toBe(0);
    expect(final.cleanup).toMatchObject({ reason: 'timeout', leftovers: [] });
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(r.cgroup)).toBe(true);
  });

  it("output keeps flowing to the ring when nobody reads: 9 MB through 64 KiB pipes, the job exits by itself", async () => {
    const call = spawn(
      process.execPath,
      ['-e', 'for (let i = 0; i < 50000; i++) process.stdout.write(`line ${i} `.padEnd(99, "é").slice(0, 95) + "\\n");'],
      { background: true },
    );
    expect(call.jobId).toMatch(/^c\d+$/);
    cgroups.push(call.cgroup as string);
    const j = job(call.jobId as string);
    const final = await j.wait();
    expect(final.state).toBe('exited');
    expect(leafReleased(call.cgroup)).toBe(true);
    expect(final.exitCode).toBe(0);
    expect(final.output.capacity).toBe(1024 * 1024);
    expect(final.output.total).toBeGreaterThan(5_000_000);
    expect(final.output.dropped).toBe(final.output.total - 1024 * 1024);
    expect(j.tail(4096).text).toMatch(/line 49999 é+\n$/);
    // From offset 0: what the ring lost is counted, and the text starts on a character.
    const all = j.read(0);
    expect(all.dropped).toBe(all.from);
    expect(all.from).toBeGreaterThanOrEqual(final.output.dropped);
    expect(all.from - final.output.dropped).toBeLessThan(2);
    expect(all.text.includes('\ufffd')).toBe(false);
    expect(all.next).toBe(final.output.total);
  });

  it('does not wait for a maxConcurrent slot, and a kept job frees its slot', async () => {
    const sup = new Supervisor({ name: `jobs-slots-${process.pid}`, maxConcurrent: 1 });
    try {
      const t = token();
      tokens.push(t);
      const kept = await sup.run('bash', ['-c', `sleep ${t} & exit 0`], { leftovers: 'keep' });
      cgroups.push(kept.cgroup);
      const bg = await sup.run('sleep', [t], { background: true });
      cgroups.push(bg.cgroup);
      // Both jobs run, and an ordinary call still gets the one slot.
      const r = await sup.run('echo', ['still runs']);
      expect(r.stdout).toBe('still runs\n');
      expect(r.queuedMs).toBeLessThan(1000);
      expect(sup.jobs().map((j) => j.id)).toEqual([kept.jobId, bg.jobId]);
      // The kernel's view: one sleep in each job's cgroup.
      const sleeps = await waitForLive(t, 2, 'sleep');
      expect(sleeps).toHaveLength(2);
      expect([...cgroupMembers(kept.cgroup), ...cgroupMembers(bg.cgroup)].sort()).toEqual([...sleeps].sort());
      // shutdown() stops the jobs too: one report for each.
      const reports = await sup.shutdown({ grace: 500 });
      expect(reports).toHaveLength(2);
      for (const rep of reports) expect(rep).toMatchObject({ reason: 'shutdown', leftovers: [] });
      await Promise.all([sup.job(kept.jobId as string).wait(), sup.job(bg.jobId as string).wait()]);
      expect(liveWith(t)).toEqual([]);
      expect(sup.jobs().map((j) => j.state)).toEqual(['stopped', 'stopped']);
      expect(cgroupExists(kept.cgroup) || cgroupExists(bg.cgroup)).toBe(false);
    } finally {
      await sup.shutdown({ grace: 100 });
    }
  });
});

describe('job output', () => {
  it('read(from) returns what came since, counts what the ring dropped, never cuts a character', async () => {
    const lines1 = ['1', '2', '3'].map((n) => `héllo wörld ${n}\n`).join('');
    const lines2 = ['1', '2', '3', '4', '5', '6', '7', '8', '9'].map((n) => `€uro ${n}\n`).join('');
    const total = Buffer.byteLength(lines1 + lines2);
    // The ring's oldest byte is the second byte of the "ö" of line 2.
    const start = Buffer.byteLength(`${lines1.split('\n')[0]}\nhéllo w`) + 1;
    const sup = new Supervisor({ name: `jobs-ring-${process.pid}`, jobBuffer: total - start });
    try {
      const call = sup.spawn('bash', ['-c', 'printf "héllo wörld %s\\n" 1 2 3; read go; printf "€uro %s\\n" 1 2 3 4 5 6 7 8 9'], {
        background: true,
      });
      const j = sup.job(call.jobId as string);
      await waitUntil(() => j.read().total === Buffer.byteLength(lines1), 5000);
      const first = j.read();
      expect(first).toEqual({ text: lines1, from: 0, next: Buffer.byteLength(lines1), dropped: 0, total: Buffer.byteLength(lines1) });
      call.stdin?.end('go\n');
      const final = await j.wait();
      expect(final.output).toEqual({ total, dropped: start, capacity: total - start });
      // What came since the first read: all of it is still held.
      expect(j.read(first.next)).toEqual({ text: lines2, from: first.next, next: total, dropped: 0, total });
      // From the start: the ring lost `start` bytes, and one more to begin on a whole character.
      const old = j.read(0);
      expect(old.from).toBe(start + 1);
      expect(old.dropped).toBe(start + 1);
      expect(old.text).toBe(`rld 2\nhéllo wörld 3\n${lines2}`);
      const part = j.read(0, { maxBytes: 20 });
      expect(part.next - part.from).toBeLessThanOrEqual(20);
      expect(Buffer.byteLength(part.text)).toBe(part.next - part.from);
      // The last 7 bytes begin inside the last "€": the tail is the 6 after it.
      expect(j.tail(7)).toEqual({ text: 'uro 9\n', from: total - 6, next: total, dropped: 1, total });
      expect(() => sup.job('c0')).toThrow(expect.objectContaining({ code: 'ERR_PROCTREE_UNKNOWN_JOB' }));
    } finally {
      await sup.shutdown();
    }
  });
});

describe.each(['pidns', 'subreaper', 'pgroup'] as Confinement[])('a kept job in the %s tier', (tier) => {
  it('is listed with a c<N> id, readable, and stopped with nothing left', async () => {
    const t = token();
    tokens.push(t);
    const r = await run('bash', ['-c', `(echo from-the-job; exec sleep ${t}) & echo main`], { leftovers: 'keep', confinement: tier });
    expect(r.confinement).toBe(tier);
    expect(r.jobId).toMatch(/^c\d+$/);
    expect(r.cgroup).toBe('');
    expect(r.stdout.startsWith('main\n') || r.stdout.startsWith('from-the-job\n'), JSON.stringify(r.stdout)).toBe(true);
    const sleeps = await waitForLive(t, 1, 'sleep');
    expect(sleeps).toHaveLength(1);
    const listed = jobs().find((j) => j.id === r.jobId);
    expect(listed?.confinement).toBe(tier);
    // The listing agrees with /proc: the sleep it shows is the one running.
    expect(listed?.processes.find((p) => p.cmdline === `sleep ${t}`)?.pid).toBe(sleeps[0]);
    await untilOutput(r.jobId as string, /from-the-job/);
    const report = await job(r.jobId as string).stop({ grace: 500 });
    expect(report.leftovers).toEqual([]);
    await job(r.jobId as string).wait();
    expect(liveWith(t)).toEqual([]);
  });
});

// A call that a test leaves to the default supervisor must not outlive the file.
afterAll(async () => {
  await Promise.all(jobs().filter((j) => j.state === 'running').map((j) => job(j.id).stop({ grace: 100 })));
});

export type { ToolCall };

describe('a kept job started when its call did', () => {
  it('startedAt is the start of the call, not the moment its leftovers made it a job', async () => {
    const sup = supervisor();
    const t = token();
    tokens.push(t);
    const before = Date.now();
    const call = sup.spawn('sh', ['-c', `sleep ${t} & sleep 0.6`], { leftovers: 'keep', stdio: 'ignore' });
    const after = Date.now();
    calls.push(call);
    const result = await call.done;
    expect(result.jobId).not.toBeNull();
    const job = sup.job(result.jobId as string);
    try {
      // The job was made 0.6 s after the start; its startedAt is the start.
      expect(job.info().startedAt).toBeGreaterThanOrEqual(before);
      expect(job.info().startedAt).toBeLessThanOrEqual(after);
    } finally {
      await job.stop({ grace: 0 });
    }
  });
});

describe('a big job', () => {
  /** The read system calls this process's main thread has made (the JS thread's: its tid is the pid). */
  const jsThreadReads = (): number => Number(/^syscr: (\d+)$/m.exec(fs.readFileSync(`/proc/self/task/${process.pid}/io`, 'utf8'))?.[1] ?? 0);

  it('info() of a 300-process tree reads 64 of them on the JS thread, the main process first; the rest come off it', async () => {
    const t = token();
    tokens.push(t);
    const sup = supervisor();
    const call = sup.spawn('bash', ['-c', `for i in $(seq 300); do sleep ${t} & done; wait`], { stdio: 'ignore', background: true });
    calls.push(call);
    await waitForLive(t, 300, 'sleep', 30_000);
    const j = sup.job(call.jobId as string);
    const before = jsThreadReads();
    const first = j.info();
    const spent = jsThreadReads() - before;
    expect(first.members).toBe(301);
    expect(first.processes[0]?.pid).toBe(call.pid);
    expect(first.processes.length).toBeGreaterThanOrEqual(64);
    // Each process's stat and cmdline: 301 of them would be more than 600 reads.
    expect(spent).toBeLessThan(400);
    // The others were read off the JS thread: a later info() has them all.
    await waitUntil(() => j.info().processes.length === 301, 20_000);
    const all = j.info();
    expect(new Set(all.processes.map((p) => p.pid))).toEqual(new Set(cgroupMembers(call.cgroup as string)));
    expect(all.processes.filter((p) => p.cmdline === `sleep ${t}`)).toHaveLength(300);
    const report = await j.stop();
    expect(report.leftovers).toEqual([]);
    expect(liveWith(t)).toEqual([]);
  }, 60_000);
});
