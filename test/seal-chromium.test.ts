// Chromium headless in a sealed call (README "Sealed calls"): the program
// agents drive most often among those that make namespaces of their own.
// As root, Chromium runs only with --no-sandbox (its rule, sealed or not);
// as a non-root harness (nobody, in a cgroup of its own handed over to it,
// as a systemd user session's) it starts its user-namespace sandbox inside
// the sealed call: Chromium refuses to run without a usable sandbox, so
// rendering a page is the proof, and from outside its renderer sits in a
// user namespace below the sealed call's. Nothing is left afterwards.
// Skipped when Chromium is not installed, unless PROCTREE_REQUIRE_CHROMIUM=1
// (CI installs Debian's chromium).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { capabilities } from '../dist/cjs/index.js';
import { cgroupMembers, killTokens, liveWith, token, waitUntil } from './helpers';
import { nobodyUid, startNobodyHarness } from './nobody-harness';
import { fileSupervisors } from './supervisors';

const caps = capabilities();
const chromium = ['chromium', 'chromium-browser', 'google-chrome']
  .map((name) => spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).stdout.trim())
  .find(Boolean);
const requireChromium = process.env.PROCTREE_REQUIRE_CHROMIUM === '1';
const why = !caps.seal.available ? `sealing unavailable: ${caps.seal.why}` : !chromium ? 'chromium is not installed' : null;
if (why && !requireChromium) console.warn(`sealed Chromium tests skipped: ${why}`);

const { supervisor } = fileSupervisors('seal-chromium');
const tokens: string[] = [];
const dirs: string[] = [];
afterAll(() => {
  killTokens(tokens);
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

// The page Chromium renders: its script runs, so the DOM it dumps differs from the source.
const PAGE = 'data:text/html,<p id=x>sealed</p><script>document.getElementById("x").textContent += "-rendered"</script>';
const RENDERED = '<p id="x">sealed-rendered</p>';

function chromiumArgs(profile: string, t: string, sandbox: boolean): string[] {
  // The token rides in an argument Chromium passes to every child process it starts.
  return [
    '--headless',
    ...(sandbox ? [] : ['--no-sandbox']),
    '--disable-gpu',
    '--no-first-run',
    `--user-data-dir=${profile}`,
    `--js-flags=--stack-size=984 --proctree-token-${t}`,
    '--dump-dom',
    PAGE,
  ];
}

/** The user namespace inode of a process, read from outside. */
function userns(pid: number): string | null {
  try {
    return fs.readlinkSync(`/proc/${pid}/ns/user`);
  } catch {
    return null;
  }
}

describe.skipIf(why !== null && !requireChromium)('Chromium headless, sealed', () => {
  it('renders a page in a root harness (--no-sandbox, as Chromium requires of root) and leaves nothing', async () => {
    if (why) throw new Error(`PROCTREE_REQUIRE_CHROMIUM=1, but ${why}`);
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-chromium-'));
    dirs.push(profile);
    const t = token();
    tokens.push(t);
    const sup = supervisor({ seal: true });
    const r = await sup.run(chromium!, chromiumArgs(profile, t, false), { timeout: 90_000, env: { ...process.env, HOME: profile } });
    expect(r.stdout, r.stderr.slice(-2000)).toContain(RENDERED);
    expect(r.exitCode).toBe(0);
    expect(liveWith(t)).toEqual([]);
  });

  it.skipIf(process.getuid?.() !== 0)("starts its user-namespace sandbox in a non-root harness's sealed call, and leaves nothing", async () => {
    if (why) throw new Error(`PROCTREE_REQUIRE_CHROMIUM=1, but ${why}`);
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-chromium-'));
    dirs.push(profile);
    const t = token();
    tokens.push(t);
    // The harness (nobody) starts the sealed call, reports its pid, and when
    // it closed, what it wrote: the test looks at the tree from outside meanwhile.
    const script = `
const { Supervisor } = require(${JSON.stringify(path.join(__dirname, '..', 'dist', 'cjs', 'index.js'))});
const [file, argsJson, profile] = process.argv.slice(1);
const sup = new Supervisor({ name: 'chromium', seal: true });
const say = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const call = sup.spawn(file, JSON.parse(argsJson), { timeout: 90000, env: { ...process.env, HOME: profile } });
let out = '', err = '';
call.stdout.on('data', (d) => (out += d));
call.stderr.on('data', (d) => (err += d));
call.on('error', (e) => { say({ error: e.code, message: e.message }); process.exit(1); });
call.once('spawn', () => say({ pid: call.pid, sealed: call.sealed, cgroup: call.cgroup, uid: process.getuid() }));
call.once('close', async (code) => {
  await sup.shutdown();
  say({ code, out, err: err.slice(-3000) });
  process.exit(0);
});
`;
    fs.chownSync(profile, nobodyUid(), nobodyUid());
    const h = startNobodyHarness(caps.cgroup2!.ownPath, 'seal-chromium', script, [chromium!, JSON.stringify(chromiumArgs(profile, t, true)), profile], { HOME: profile });
    try {
      const first = await h.line<{ pid: number; sealed: boolean; cgroup: string; uid: number; error?: string; message?: string }>(0, 30_000);
      expect(first.error, first.message).toBeUndefined();
      expect(first.uid).toBe(h.uid);
      expect(first.sealed).toBe(true);
      const callNs = userns(first.pid);
      // While it runs: some member of the leaf is in a user namespace of
      // Chromium's own (neither the host's nor the sealed call's).
      const hostNs = userns(process.pid);
      let sandboxed = false;
      await waitUntil(() => {
        sandboxed ||= cgroupMembers(first.cgroup).some((pid) => {
          const ns = userns(pid);
          return ns !== null && ns !== hostNs && ns !== callNs;
        });
        return sandboxed || h.lines.length >= 2 || h.child.exitCode !== null;
      }, 60_000);
      const done = await h.line<{ code: number; out: string; err: string }>(1, 90_000);
      expect(done.out, done.err).toContain(RENDERED);
      expect(done.code).toBe(0);
      expect(sandboxed, 'a Chromium process in a user namespace of its own, seen from outside').toBe(true);
      await waitUntil(() => h.child.exitCode !== null, 20_000);
      expect(liveWith(t)).toEqual([]);
      expect(cgroupMembers(h.own).filter((pid) => pid !== h.child.pid)).toEqual([]);
    } finally {
      await h.remove();
    }
  });
});
