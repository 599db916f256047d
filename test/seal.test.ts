// Sealed calls (`seal: true`, README "Sealed calls"): the command runs in its
// cgroup leaf inside new user, PID, mount and cgroup namespaces, without a
// capability. Each "cannot" is proved from outside the call (the leaf's
// cgroup.procs, /proc of the harness, the harness and a sibling call alive
// and not frozen), and each assertion is one an unsealed call would fail:
// with `seal` ignored, the command would see the host's cgroups and
// processes, hold root's capabilities, and its writes would move it out.
// Every hostile step (`kill -9 -1`, umount, writes to cgroup.procs) runs only
// after the same shell proved from inside that it is sealed (its PID 1 is the
// shim, the harness's pid is not there, its cgroup namespace is rooted at its
// leaf), and refuses otherwise: with `seal` ignored, those steps would act
// on the host as root.
import { spawn as spawnChild, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { capabilities, run, type ToolCall } from '../dist/cjs/index.js';
import { cgroupMembers, httpGet, killCgroup, killTokens, leafReleased, liveWith, running, startCanary, token, waitForLive, waitUntil } from './helpers';
import { startNobodyHarness } from './nobody-harness';
import { fileSupervisors } from './supervisors';

const caps = capabilities();
const available = caps.seal.available;
if (!available) console.warn(`seal tests skipped: ${caps.seal.why}`);

const { supervisor } = fileSupervisors('seal');
const tokens: string[] = [];
const leaves: Array<string | null> = [];
const dirs: string[] = [];

afterAll(() => {
  killTokens(tokens);
  for (const leaf of leaves) killCgroup(leaf);
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

function tok(): string {
  const t = token();
  tokens.push(t);
  return t;
}

function track(call: ToolCall): ToolCall {
  call.on('error', () => {});
  call.once('spawn', () => leaves.push(call.cgroup));
  return call;
}

function spawned(call: ToolCall): Promise<void> {
  return new Promise((resolve, reject) => {
    call.once('spawn', () => resolve());
    call.once('error', reject);
  });
}

/** The unified (v2) line of /proc/<pid>/cgroup, read by the harness: the path below the cgroup2 mount. */
function cgroupOf(pid: number): string | null {
  try {
    return fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').match(/^0::(.*)$/m)?.[1] ?? null;
  } catch {
    return null;
  }
}

/** A leaf's path as /proc/<pid>/cgroup names it (relative to the cgroup2 mount). */
function relative(leaf: string): string {
  const mount = caps.cgroup2?.mount ?? '/sys/fs/cgroup';
  return leaf.slice(mount.length);
}

/** The state letter of /proc/<pid>/stat (R, S, T for stopped, ...). */
function state(pid: number): string {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat[stat.lastIndexOf(')') + 2];
}

// What a shell checks before anything hostile: refuses (exit 90..92) unless
// its PID 1 is the seal shim, the harness's pid is not visible, and its
// cgroup namespace is rooted at its leaf.
const PROVE_SEALED = `
init=$(tr '\\0' ' ' < /proc/1/cmdline)
case "$init" in *proctree-helper\\ seal\\ *) ;; *) echo "REFUSED init=$init"; exit 90 ;; esac
if [ -e "/proc/$HARNESS_PID" ]; then echo REFUSED-harness-visible; exit 91; fi
grep -qx '0::/' /proc/self/cgroup || { echo REFUSED-cgroup; exit 92; }
echo PROVED
`;

describe.skipIf(!available)('sealed calls (root harness)', () => {
  it('sees only its own cgroup (0::/, its leaf files) and only its own processes', async () => {
    const sup = supervisor({ seal: true });
    const script = `
cat /proc/self/cgroup; echo ---
ls /sys/fs/cgroup; echo ---
for d in /proc/[0-9]*; do echo "\${d#/proc/}"; done; echo ---
tr '\\0' ' ' < /proc/1/cmdline | grep -q '^[^ ]*/proctree-helper seal ' && echo init-is-shim || echo init-other; echo ---
[ -e "/proc/$HARNESS_PID" ] && echo harness-visible || echo harness-invisible
`;
    const call = track(sup.spawn('sh', ['-c', script], { env: { ...process.env, HARNESS_PID: String(process.pid) } }));
    let out = '';
    call.stdout!.on('data', (d: Buffer) => (out += d));
    await spawned(call);
    const leaf = call.cgroup!;
    // Read from outside while it runs (its leaf, as the harness sees it).
    const outsideFiles = fs.readdirSync(leaf).sort();
    const code = await new Promise((r) => call.once('close', r));
    expect(code).toBe(0);
    expect(call.sealed).toBe(true);
    const [cgroup, files, pids, init, harness] = out.split('---\n').map((s) => s.trim());
    expect(cgroup.split('\n')).toContain('0::/');
    expect(cgroup).not.toContain('proctree-');
    expect(files.split('\n').sort()).toEqual(outsideFiles);
    expect(files.split('\n')).not.toContain('unified');
    // A glob in the shell itself: the shim (1) and the shell (2), nothing else.
    expect(pids.split('\n').map(Number)).toEqual([1, 2]);
    expect(init).toBe('init-is-shim');
    expect(harness).toBe('harness-invisible');
    await waitUntil(() => leafReleased(leaf), 5000);
    expect(leafReleased(leaf)).toBe(true);
  });

  it('cannot move itself out of its leaf: every write fails, and from outside each of its processes is still in it', async () => {
    const sup = supervisor({ seal: true });
    const t = tok();
    const mount = caps.cgroup2!.mount;
    const call = track(sup.spawn('sh', ['-c', 'exec sh -s'], { env: { ...process.env, HARNESS_PID: String(process.pid) } }));
    await spawned(call);
    const leaf = call.cgroup!;
    const parent = path.dirname(leaf);
    // Every path to a cgroup.procs it may find: through the covered mount,
    // by the host's paths (the leaf's parent, the root, each v1 hierarchy),
    // through the shim's root, and whatever a search of /sys turns up.
    const targets = [
      '/sys/fs/cgroup/../cgroup.procs',
      `${parent}/cgroup.procs`,
      `${mount}/cgroup.procs`,
      `${leaf}/../cgroup.procs`,
      ...fs.readdirSync('/sys/fs/cgroup').map((d) => `/sys/fs/cgroup/${d}/cgroup.procs`),
      `/proc/1/root${parent}/cgroup.procs`,
      `/proc/1/root${mount}/cgroup.procs`,
    ];
    // The writes would move processes of the host's cgroups if it were not
    // sealed: they run only once the shell proved its namespaces.
    const script = `${PROVE_SEALED}
sleep ${t} &
for f in ${targets.map((f) => `'${f}'`).join(' ')} $(find /sys/fs /run /tmp /mnt -maxdepth 6 -name cgroup.procs 2>/dev/null | head -n 100); do
  for p in $$ $!; do
    if echo $p 2>/dev/null > "$f"; then echo "wrote $f"; fi
  done
done
echo DONE
`;
    let out = '';
    call.stdout!.on('data', (d: Buffer) => (out += d));
    call.stdin!.end(`${script}\nexec sleep ${t}\n`);
    // A find over /sys/fs and a hundred writes: on a loaded machine, seconds.
    await waitUntil(() => out.includes('DONE') || /REFUSED/.test(out), 90_000);
    expect(out).toContain('PROVED');
    expect(out).toContain('DONE');
    const sleepers = await waitForLive(t, 2, 'sleep');
    expect(sleepers).toHaveLength(2);
    // From outside: the leaf holds both, and each one's cgroup is the leaf.
    const members = cgroupMembers(leaf);
    for (const pid of sleepers) {
      expect(members).toContain(pid);
      expect(cgroupOf(pid)).toBe(relative(leaf));
    }
    // The only writes that can succeed are into its own namespace root, the leaf itself.
    for (const line of out.split('\n').filter((l) => l.startsWith('wrote '))) {
      expect(line).toBe('wrote /sys/fs/cgroup/cgroup.procs');
    }
    const report = await call.terminate();
    expect(report.leftovers).toEqual([]);
    expect(liveWith(t)).toEqual([]);
    expect(cgroupMembers(leaf)).toEqual([]);
  }, 120_000);

  it('kill -9 -1 inside (after proving its PID namespace from inside) kills only its own processes', async () => {
    const canary = startCanary();
    try {
      const sup = supervisor();
      const sibT = tok();
      const sibling = track(sup.spawn('sleep', [sibT]));
      await spawned(sibling);
      const sibLeaf = sibling.cgroup!;
      const t = tok();
      const sealed = supervisor({ seal: true });
      const script = `${PROVE_SEALED}
sleep ${t} & sleep ${t} & setsid sleep ${t} &
n=0; while [ $(for d in /proc/[0-9]*; do cat $d/cmdline 2>/dev/null | tr '\\0' ' '; echo; done | grep -c "sleep ${t}") -lt 3 ] && [ $n -lt 500 ]; do n=$((n+1)); sleep 0.01; done
echo ARMED
kill -9 -1
echo "survived-self"
`;
      const result = await sealed.run('sh', ['-c', script], { env: { ...process.env, HARNESS_PID: String(process.pid) } });
      expect(result.stdout).toContain('PROVED');
      expect(result.stdout).toContain('ARMED');
      expect(result.exitCode).toBe(0);
      // Its own sleepers are gone, the tree is empty...
      expect(liveWith(t)).toEqual([]);
      expect(leafReleased(result.cgroup)).toBe(true);
      // ...and nothing outside it was touched: the harness, a process of the
      // harness's own, and a sibling call, all running and not stopped or frozen.
      expect(running(process.pid)).toBe(true);
      expect(running(canary.child.pid!)).toBe(true);
      expect(['T', 't']).not.toContain(state(canary.child.pid!));
      expect(running(sibling.pid!)).toBe(true);
      expect(['T', 't']).not.toContain(state(sibling.pid!));
      expect(fs.readFileSync(`${sibLeaf}/cgroup.events`, 'utf8')).toMatch(/^frozen 0$/m);
      expect(cgroupMembers(sibLeaf)).toContain(sibling.pid);
      await sibling.terminate();
      expect(liveWith(sibT)).toEqual([]);
    } finally {
      canary.child.kill('SIGKILL');
    }
  });

  it("cannot touch another call: freeze, kill or rmdir its leaf, read its environ, signal it or the harness", async () => {
    const sup = supervisor();
    const sibT = tok();
    const secret = `secret-${sibT}`;
    const sibling = track(sup.spawn('sleep', [sibT], { env: { ...process.env, SIBLING_SECRET: secret } }));
    await spawned(sibling);
    const sib = sibling.cgroup!;
    const sealed = supervisor({ seal: true });
    // Every one of these would act on the sibling (a call of this test's own) if it were not sealed.
    const script = `${PROVE_SEALED}
for f in "$SIB/cgroup.freeze" "/proc/1/root$SIB/cgroup.freeze" "$SIB/cgroup.kill" "/proc/1/root$SIB/cgroup.kill" "$SIB/cgroup.procs"; do
  if echo 1 2>/dev/null > "$f"; then echo "wrote $f"; fi
done
rmdir "$SIB" 2>/dev/null && echo rmdir-worked
cat "/proc/$SIB_PID/environ" 2>/dev/null | tr '\\0' '\\n' | grep SIBLING_SECRET
kill -STOP "$SIB_PID" 2>/dev/null && echo stopped-sibling
kill -9 "$SIB_PID" 2>/dev/null && echo killed-sibling
kill -9 "$HARNESS_PID" 2>/dev/null && echo killed-harness
echo DONE
`;
    const env = { ...process.env, HARNESS_PID: String(process.pid), SIB: sib, SIB_PID: String(sibling.pid) };
    const r = await sealed.run('sh', ['-c', script], { env });
    expect(r.stdout).toContain('PROVED');
    expect(r.stdout).toContain('DONE');
    expect(r.stdout).not.toContain(secret);
    // From outside: the sibling runs, is not stopped or frozen, and its leaf is there with it in it.
    expect(running(sibling.pid!)).toBe(true);
    expect(['T', 't']).not.toContain(state(sibling.pid!));
    expect(fs.existsSync(sib)).toBe(true);
    expect(fs.readFileSync(`${sib}/cgroup.events`, 'utf8')).toMatch(/^frozen 0$/m);
    expect(cgroupMembers(sib)).toEqual([sibling.pid]);
    expect(running(process.pid)).toBe(true);
    await sibling.terminate();
    expect(liveWith(sibT)).toEqual([]);
  });

  it('holds no capability, and cannot unmount what hides the host (also from a nested user namespace)', async () => {
    const sup = supervisor({ seal: true });
    // umount as root would take the host's mounts away if it were not
    // sealed: it runs only once the shell proved its namespaces.
    const script = `${PROVE_SEALED}
grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status
umount /sys/fs/cgroup 2>/dev/null; echo "umount-cgroup=$?"
umount -l /sys/fs/cgroup 2>/dev/null; echo "umount-lazy-cgroup=$?"
umount /proc 2>/dev/null; echo "umount-proc=$?"
if command -v unshare >/dev/null && unshare -Urm true 2>/dev/null; then
  unshare -Urm sh -c 'umount /sys/fs/cgroup 2>/dev/null; echo "nested-umount-cgroup=$?"; umount -l /proc 2>/dev/null; echo "nested-umount-proc=$?"'
fi
stat -f -c 'fs=%T' /sys/fs/cgroup
[ -e /sys/fs/cgroup/unified ] && echo host-cgroups-visible || echo host-cgroups-hidden
`;
    const r = await sup.run('sh', ['-c', script], { env: { ...process.env, HARNESS_PID: String(process.pid) } });
    expect(r.stdout).toContain('PROVED');
    expect(r.exitCode).toBe(0);
    for (const name of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) {
      expect(r.stdout).toMatch(new RegExp(`^${name}:\\s+0000000000000000$`, 'm'));
    }
    expect(r.stdout).toMatch(/^umount-cgroup=[1-9]\d*$/m);
    expect(r.stdout).toMatch(/^umount-lazy-cgroup=[1-9]\d*$/m);
    expect(r.stdout).toMatch(/^umount-proc=[1-9]\d*$/m);
    // Mounts that came from a more privileged namespace are locked together.
    if (r.stdout.includes('nested-umount')) {
      expect(r.stdout).toMatch(/^nested-umount-cgroup=[1-9]\d*$/m);
      expect(r.stdout).toMatch(/^nested-umount-proc=[1-9]\d*$/m);
    }
    expect(r.stdout).toMatch(/^fs=cgroup2fs$/m);
    expect(r.stdout).toContain('host-cgroups-hidden');
  });

  it('exits and dies like an unsealed call: exit 7, SIGTERM from terminate(), a setsid escapee stopped', async () => {
    const sup = supervisor({ seal: true });
    const plain = supervisor();
    const seven = await sup.run('sh', ['-c', 'exit 7']);
    expect(seven.exitCode).toBe(7);
    expect(seven.signal).toBeNull();

    // terminate() of a sleeping command: the same report as unsealed.
    const reports = [];
    for (const s of [sup, plain]) {
      const call = track(s.spawn('sleep', [tok()]));
      await spawned(call);
      const exit = new Promise<[number | null, string | null]>((r) => call.once('exit', (c, sig) => r([c, sig])));
      // From outside: how many PID namespaces deep the command is (NSpid).
      const depth = fs.readFileSync(`/proc/${call.pid}/status`, 'utf8').match(/^NSpid:\s+(.*)$/m)![1].split(/\s+/).length;
      const report = await call.terminate();
      reports.push({ exit: await exit, reason: report.reason, signaled: report.signaled, killed: report.killed, escaped: report.escaped, verified: report.verified, leftovers: report.leftovers, depth, sealed: call.sealed });
    }
    expect(reports[0]).toEqual({ ...reports[1], depth: 2, sealed: true });
    expect(reports[1].depth).toBe(1);
    expect(reports[0].exit).toEqual([null, 'SIGTERM']);
    expect(reports[0].verified).toBe('cgroup.events');

    // A tree with an escapee in a session of its own.
    const t = tok();
    const call = track(sup.spawn('sh', ['-c', `setsid sleep ${t} & sleep ${t}; wait`]));
    await spawned(call);
    const leaf = call.cgroup!;
    const sleepers = await waitForLive(t, 2, 'sleep');
    expect(sleepers).toHaveLength(2);
    for (const pid of sleepers) expect(cgroupMembers(leaf)).toContain(pid);
    const report = await call.terminate();
    expect(call.sealed).toBe(true);
    expect(report.leftovers).toEqual([]);
    expect(report.escaped).toBeGreaterThanOrEqual(1);
    expect(liveWith(t)).toEqual([]);
    expect(cgroupMembers(leaf)).toEqual([]);
  });

  it('escapes made inside stay stopped: a cgroup of its own below the leaf, nested user and PID namespaces, a setsid daemon', async () => {
    const sup = supervisor({ seal: true });
    const t = tok();
    // Each escape is made by the sealed shell itself, with what it holds: its
    // own cgroup namespace (the leaf is its /sys/fs/cgroup) and unprivileged
    // user namespaces (PID and mount namespaces below its own; unmapped: as
    // root it may not map uid 0 there, README "Sealed calls").
    const script = `${PROVE_SEALED}
mkdir /sys/fs/cgroup/inner && echo $$ > /sys/fs/cgroup/inner/cgroup.procs && echo MOVED-INNER
sleep ${t} &
unshare -Upf --mount-proc sleep ${t} &
setsid sh -c 'sleep ${t} & exec sleep ${t}' &
echo READY
wait
`;
    let out = '';
    const call = track(sup.spawn('sh', ['-c', script], { env: { ...process.env, HARNESS_PID: String(process.pid) } }));
    call.stdout!.on('data', (d: Buffer) => (out += d));
    await spawned(call);
    const leaf = call.cgroup!;
    await waitUntil(() => out.includes('READY') || /REFUSED/.test(out), 10000);
    expect(out).toContain('PROVED');
    expect(out).toContain('MOVED-INNER');
    const sleepers = await waitForLive(t, 4, 'sleep');
    expect(sleepers).toHaveLength(4);
    // From outside: every one is in the leaf's subtree, the first in the cgroup it made.
    const members = cgroupMembers(leaf);
    for (const pid of sleepers) {
      expect(members).toContain(pid);
      expect(cgroupOf(pid)!.startsWith(relative(leaf))).toBe(true);
    }
    expect(sleepers.some((pid) => cgroupOf(pid) === `${relative(leaf)}/inner`)).toBe(true);
    // One of them is two PID namespaces below the sealed call's (NSpid: the host's, the call's, unshare's).
    const depths = sleepers.map((pid) => fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^NSpid:\s+(.*)$/m)![1].split(/\s+/).length);
    expect(Math.max(...depths)).toBe(3);
    const report = await call.terminate();
    expect(report.leftovers).toEqual([]);
    expect(report.verified).toBe('cgroup.events');
    expect(liveWith(t)).toEqual([]);
    expect(cgroupMembers(leaf)).toEqual([]);
    await waitUntil(() => leafReleased(leaf), 5000);
    expect(leafReleased(leaf)).toBe(true);
  });

  it('dies with its harness: the harness SIGKILLed, the guardian stops every sealed tree', async () => {
    const t = tok();
    const script = `
const { Supervisor } = require(${JSON.stringify(path.join(__dirname, '..', 'dist', 'cjs', 'index.js'))});
const t = process.argv[1];
const sup = new Supervisor({ name: 'sealed-death', seal: true });
const calls = [0, 1].map(() => sup.spawn('sh', ['-c', 'setsid sleep ' + t + ' & exec sleep ' + t], { stdio: 'ignore' }));
Promise.all(calls.map((c) => new Promise((r, j) => { c.once('spawn', r); c.once('error', j); })))
  .then(() => process.stdout.write(JSON.stringify({ sealed: calls.map((c) => c.sealed), cgroups: calls.map((c) => c.cgroup) }) + '\\n'))
  .catch((e) => { process.stdout.write(JSON.stringify({ error: e.message }) + '\\n'); process.exit(1); });
setInterval(() => {}, 1000);
`;
    const child = spawnChild(process.execPath, ['-e', script, t], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => (out += d));
      await waitUntil(() => out.includes('\n') || child.exitCode !== null, 20000);
      const info = JSON.parse(out.split('\n')[0]) as { sealed: boolean[]; cgroups: string[]; error?: string };
      expect(info.error).toBeUndefined();
      expect(info.sealed).toEqual([true, true]);
      for (const cg of info.cgroups) leaves.push(cg);
      expect(await waitForLive(t, 4, 'sleep')).toHaveLength(4);
      child.kill('SIGKILL');
      await waitUntil(() => liveWith(t).length === 0 && info.cgroups.every((cg) => cgroupMembers(cg).length === 0), 10000);
      expect(liveWith(t)).toEqual([]);
      for (const cg of info.cgroups) expect(cgroupMembers(cg)).toEqual([]);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });

  it('the ladder works on it from outside: timeout, pause and resume (cgroup.freeze), kill(SIGKILL) (cgroup.kill)', async () => {
    const sup = supervisor({ seal: true });
    const t = tok();
    const timed = await sup.run('sh', ['-c', `setsid sleep ${t} & exec sleep ${t}`], { timeout: 300, grace: 200 });
    expect(timed.timedOut).toBe(true);
    expect(timed.signal).toBe('SIGTERM');
    expect(timed.cleanup).toMatchObject({ reason: 'timeout', leftovers: [], verified: 'cgroup.events' });
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(timed.cgroup)).toBe(true);

    const t2 = tok();
    const call = track(sup.spawn('sh', ['-c', `sleep ${t2} & exec sleep ${t2}`]));
    await spawned(call);
    const leaf = call.cgroup!;
    const sleepers = await waitForLive(t2, 2, 'sleep');
    expect(sleepers).toHaveLength(2);
    // Sealed, by the kernel's account: one PID namespace below the harness's.
    const nspid = fs.readFileSync(`/proc/${call.pid}/status`, 'utf8').match(/^NSpid:\s+(.*)$/m)![1].split(/\s+/);
    expect(nspid).toHaveLength(2);
    await call.pause();
    expect(fs.readFileSync(`${leaf}/cgroup.events`, 'utf8')).toMatch(/^frozen 1$/m);
    await call.resume();
    expect(fs.readFileSync(`${leaf}/cgroup.events`, 'utf8')).toMatch(/^frozen 0$/m);
    const exit = new Promise<string | null>((r) => call.once('exit', (_c, sig) => r(sig)));
    call.kill('SIGKILL');
    expect(await exit).toBe('SIGKILL');
    await new Promise((r) => call.once('close', r));
    expect(liveWith(t2)).toEqual([]);
    expect(cgroupMembers(leaf)).toEqual([]);
  });

  it("creates files owned by the harness's uid (its own id mapped to itself) and keeps the host network", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-seal-'));
    dirs.push(dir);
    const sup = supervisor({ seal: true });
    const r = await sup.run('sh', ['-c', 'touch made.txt; mkdir made.d; cat /proc/self/uid_map /proc/self/gid_map'], { cwd: dir });
    expect(r.exitCode).toBe(0);
    for (const f of ['made.txt', 'made.d']) {
      const st = fs.statSync(path.join(dir, f));
      expect(st.uid).toBe(process.getuid!());
      expect(st.gid).toBe(process.getgid!());
    }
    // One id each, mapped to itself: a user namespace of its own.
    const maps = r.stdout.trim().split('\n').map((l) => l.trim().split(/\s+/).map(Number));
    expect(maps).toEqual([
      [process.getuid!(), process.getuid!(), 1],
      [process.getgid!(), process.getgid!(), 1],
    ]);

    // A Python HTTP server, sealed, answers the harness on the host's network.
    const port = await freePort();
    fs.writeFileSync(path.join(dir, 'hello.txt'), 'hello sealed\n');
    const server = track(sup.spawn('python3', ['-m', 'http.server', String(port), '--bind', '127.0.0.1'], { cwd: dir }));
    const serverOut: Buffer[] = [];
    server.stderr!.on('data', (d: Buffer) => serverOut.push(d));
    await spawned(server);
    let answer: { status: number; body: string } | null = null;
    const deadline = Date.now() + 15000;
    while (answer === null && Date.now() < deadline) {
      answer = await httpGet(port, 'hello.txt').catch(() => null);
      if (answer === null) await new Promise((r) => setTimeout(r, 50));
    }
    expect(answer).toEqual({ status: 200, body: 'hello sealed\n' });
    // From outside: the server is in a PID namespace below ours (two NSpid numbers).
    const nspid = fs.readFileSync(`/proc/${server.pid}/status`, 'utf8').match(/^NSpid:\s+(.*)$/m)![1].split(/\s+/);
    expect(nspid).toHaveLength(2);
    expect(server.sealed).toBe(true);
    await server.terminate();
    expect(cgroupMembers(server.cgroup ?? '/nonexistent')).toEqual([]);
  });

  it('runs ordinary programs sealed: ps (its own processes only), node, git, npm, bash job control, a terminal', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-seal-'));
    dirs.push(dir);
    const sup = supervisor({ seal: true });
    const ps = await sup.run('sh', ['-c', 'ps -e -o pid=,comm='], { cwd: dir });
    expect(ps.exitCode).toBe(0);
    expect(ps.stdout.trim().split('\n').map((l) => l.trim().split(/\s+/))).toEqual([
      ['1', 'proctree-helper'],
      ['2', 'sh'],
      ['3', 'ps'],
    ]);
    const node = await sup.run(process.execPath, ['-e', 'console.log(process.pid)'], { cwd: dir });
    expect(node).toMatchObject({ exitCode: 0, stdout: '2\n' });
    const git = await sup.run('sh', ['-c', 'command -v git >/dev/null || { echo no-git; exit 0; }; git init -q . && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && git log --oneline | wc -l'], { cwd: dir });
    expect(git.exitCode).toBe(0);
    expect(['1', 'no-git']).toContain(git.stdout.trim());
    // npm: a package made and one of its scripts run (nothing fetched).
    const npm = await sup.run('sh', ['-c', 'npm init -y >/dev/null && npm pkg set scripts.hello="echo hello from \\$npm_package_name" && npm run -s hello'], {
      cwd: dir,
      env: { ...process.env, PATH: `${path.dirname(process.execPath)}:${process.env.PATH}`, npm_config_cache: path.join(dir, '.npm'), npm_config_update_notifier: 'false' },
    });
    expect(npm.exitCode, npm.stderr).toBe(0);
    expect(npm.stdout.trim()).toBe(`hello from ${path.basename(dir).toLowerCase()}`);
    // A sleep that outlasts any delay before `jobs` (a short one may be done
    // and reaped by then: 'Done'), ended by its job id.
    const jobs = await sup.run('bash', ['-c', 'set -m; sleep 30 & jobs; kill %1; wait; echo done']);
    expect(jobs).toMatchObject({ exitCode: 0, stdout: expect.stringMatching(/Running\s+sleep 30 &\ndone\n$/) });
    const tty = await sup.run('sh', ['-c', 'tty; echo pid=$$'], { pty: true });
    expect(tty.exitCode).toBe(0);
    expect(tty.stdout).toMatch(/^\/dev\/pts\/\d+\r\npid=2\r\n$/);
  });

  it('is refused where it cannot be had: ERR_PROCTREE_SEAL_UNAVAILABLE, and nothing runs', async () => {
    expect(caps.seal).toEqual({ available: true });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-seal-'));
    dirs.push(dir);
    const marker = path.join(dir, 'ran');
    const sup = supervisor();
    const call = sup.spawn('sh', ['-c', `touch ${marker}`], { seal: true, confinement: 'pgroup' });
    const err = await new Promise<NodeJS.ErrnoException>((resolve) => call.once('error', resolve));
    expect(err.code).toBe('ERR_PROCTREE_SEAL_UNAVAILABLE');
    expect(err.message).toMatch(/cgroup tier.*'pgroup'/);
    expect(call.pid).toBeUndefined();
    expect(call.sealed).toBe(false);
    await expect(run('sh', ['-c', `touch ${marker}`], { seal: true, confinement: 'pidns' })).rejects.toMatchObject({
      code: 'ERR_PROCTREE_SEAL_UNAVAILABLE',
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(fs.existsSync(marker)).toBe(false);
    // A supervisor's default: the same refusal for every call of a tier that cannot seal.
    const sealedSup = supervisor({ seal: true });
    await expect(sealedSup.run('sh', ['-c', `touch ${marker}`], { confinement: 'subreaper' })).rejects.toMatchObject({
      code: 'ERR_PROCTREE_SEAL_UNAVAILABLE',
    });
    // A call's own `seal: false` wins over the supervisor's default.
    const plain = await sealedSup.run('sh', ['-c', 'cat /proc/self/cgroup'], { seal: false });
    expect(plain.stdout).not.toMatch(/^0::\/$/m);
    expect(fs.existsSync(marker)).toBe(false);
  });
});

// A harness whose /proc has a part covered (what a container runtime's
// masked paths do): a user namespace may not mount a proc of its own there
// (the kernel's mount_too_revealing), so sealing cannot be had. Made for
// real in a private mount namespace of the harness's own: tmpfs over
// /proc/sys. Needs root for the mount.
const harnessScript = `
const { capabilities, run } = require(${JSON.stringify(path.join(__dirname, '..', 'dist', 'cjs', 'index.js'))});
const marker = process.argv[1];
(async () => {
  const seal = capabilities().seal;
  let code = null, message = null;
  try { await run('sh', ['-c', 'touch ' + marker], { seal: true }); } catch (e) { code = e.code; message = e.message; }
  const plain = await run('sh', ['-c', 'echo plain-ran']);
  process.stdout.write(JSON.stringify({ seal, code, message, plain: plain.stdout.trim() }));
})();
`;

describe.skipIf(process.getuid?.() !== 0)('a harness where a user namespace cannot mount its own /proc', () => {
  it('says so in capabilities().seal, refuses sealed calls (ERR_PROCTREE_SEAL_UNAVAILABLE), and nothing runs', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-seal-'));
    dirs.push(dir);
    const marker = path.join(dir, 'ran');
    const r = spawnSync(
      'unshare',
      ['--mount', '--propagation', 'private', 'sh', '-c', 'mount -t tmpfs none /proc/sys && exec "$0" -e "$1" "$2"', process.execPath, harnessScript, marker],
      { encoding: 'utf8', timeout: 60000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { seal: { available: boolean; why?: string }; code: string | null; message: string | null; plain: string };
    expect(out.seal.available).toBe(false);
    expect(out.seal.why).toMatch(/mount\(proc, \/proc\)/);
    expect(out.code).toBe('ERR_PROCTREE_SEAL_UNAVAILABLE');
    expect(out.message).toMatch(/not run.*mount\(proc, \/proc\)/);
    expect(fs.existsSync(marker)).toBe(false);
    // The same harness runs unsealed calls as before.
    expect(out.plain).toBe('plain-ran');
  });
});

// A harness under the seccomp profile of a container engine that refuses new
// user namespaces (test/fixtures/seccomp-no-userns.c: CLONE_NEWUSER in clone
// and unshare is EPERM, clone3 is ENOSYS), as Docker's default does.
describe.skipIf(!available || spawnSync('cc', ['--version']).status !== 0)('a harness whose seccomp filter refuses user namespaces', () => {
  it('says so in capabilities().seal, refuses sealed calls (ERR_PROCTREE_SEAL_UNAVAILABLE), and nothing runs', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-seal-'));
    dirs.push(dir);
    const filter = path.join(dir, 'seccomp-no-userns');
    const cc = spawnSync('cc', ['-O2', '-o', filter, path.join(__dirname, 'fixtures', 'seccomp-no-userns.c')], { encoding: 'utf8' });
    expect(cc.status, cc.stderr).toBe(0);
    const marker = path.join(dir, 'ran');
    const r = spawnSync(filter, [process.execPath, '-e', harnessScript, marker], { encoding: 'utf8', timeout: 60000 });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { seal: { available: boolean; why?: string }; code: string | null; message: string | null; plain: string };
    expect(out.seal.available).toBe(false);
    expect(out.seal.why).toMatch(/user namespace/i);
    expect(out.code).toBe('ERR_PROCTREE_SEAL_UNAVAILABLE');
    expect(out.message).toMatch(/not run/);
    expect(fs.existsSync(marker)).toBe(false);
    expect(out.plain).toBe('plain-ran');
  });
});

// A harness that is not root: nobody, in a cgroup of its own that the test
// made and handed over (chowned: a delegated subtree, as a systemd user
// session's). Unsealed, its calls run as nobody too and could write their
// pid into that cgroup's cgroup.procs (nobody's own): that is the escape
// sealing closes for an unprivileged harness.
const nobodyScript = `
const { capabilities, Supervisor } = require(${JSON.stringify(path.join(__dirname, '..', 'dist', 'cjs', 'index.js'))});
const [t, own] = process.argv.slice(1);
const prove = ${JSON.stringify(PROVE_SEALED)};
(async () => {
  const caps = capabilities();
  const sup = new Supervisor({ name: 'nobody', seal: true });
  const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
  const script = prove + 'for f in "$OWN/cgroup.procs" /sys/fs/cgroup/../cgroup.procs; do echo $$ 2>/dev/null > "$f" && echo "wrote $f"; done; echo DONE; exec sleep ' + t;
  const call = sup.spawn('sh', ['-c', script], { env: { ...process.env, HARNESS_PID: String(process.pid), OWN: own } });
  call.on('error', (e) => { say({ error: e.code, message: e.message }); process.exit(1); });
  let out = '';
  call.stdout.on('data', (d) => {
    out += d;
    if (out.includes('DONE')) say({ uid: process.getuid(), seal: caps.seal, pid: call.pid, sealed: call.sealed, cgroup: call.cgroup, out });
  });
  process.stdin.once('data', async () => {
    const report = await call.terminate();
    await sup.shutdown();
    say({ report });
    process.exit(0);
  });
})();
`;

describe.skipIf(!available || process.getuid?.() !== 0)('sealed calls of a non-root harness with a delegated subtree', () => {
  it("run as the harness's user, cannot write the harness's own cgroup.procs, and are stopped", async () => {
    const t = tok();
    const h = startNobodyHarness(caps.cgroup2!.ownPath, 'seal-nobody', nobodyScript, [t]);
    try {
      const first = await h.line<{ uid: number; seal: { available: boolean }; pid: number; sealed: boolean; cgroup: string; out: string }>(0, 20000);
      expect(first.uid, h.lines[0]).toBe(h.uid);
      expect(first.seal).toEqual({ available: true });
      expect(first.sealed).toBe(true);
      expect(first.out).toContain('PROVED');
      expect(first.out).not.toContain('wrote');
      // From outside: its leaf is below the delegated cgroup, the command runs
      // as nobody in a PID namespace below ours, and it is still in its leaf.
      expect(first.cgroup.startsWith(`${h.own}/`)).toBe(true);
      const [sleeper] = await waitForLive(t, 1, 'sleep');
      expect(sleeper).toBe(first.pid);
      const status = fs.readFileSync(`/proc/${sleeper}/status`, 'utf8');
      expect(status).toMatch(new RegExp(`^Uid:\\s+${h.uid}\\s`, 'm'));
      expect(status.match(/^NSpid:\s+(.*)$/m)![1].split(/\s+/)).toHaveLength(2);
      expect(cgroupOf(sleeper)).toBe(relative(first.cgroup));
      expect(cgroupMembers(h.own).filter((p) => p !== h.child.pid)).toContain(sleeper);
      expect(fs.readFileSync(`${h.own}/cgroup.procs`, 'utf8').split('\n').filter(Boolean).map(Number)).not.toContain(sleeper);
      h.child.stdin!.write('stop\n');
      const { report } = await h.line<{ report: { leftovers: unknown[]; verified: string } }>(1, 20000);
      expect(report).toMatchObject({ leftovers: [], verified: 'cgroup.events' });
      // The harness's own argv holds the token too: it is gone once it exited.
      await waitUntil(() => h.child.exitCode !== null, 20000);
      expect(liveWith(t)).toEqual([]);
    } finally {
      await h.remove();
    }
  });
});

describe('seal option', () => {
  it('is a boolean (ERR_INVALID_ARG_TYPE otherwise), on calls and supervisors', () => {
    const sup = supervisor();
    expect(() => sup.spawn('true', [], { seal: 'yes' as unknown as boolean })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => supervisor({ seal: 1 as unknown as boolean })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(typeof caps.seal.available).toBe('boolean');
    if (!caps.seal.available) expect(typeof caps.seal.why).toBe('string');
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}
