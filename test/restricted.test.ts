// A harness inside a restricted container, made for real: the conditions a
// Docker container with its default profile gives, built from kernel pieces
// rather than a container engine (none runs here):
//   - a cgroup namespace rooted at a cgroup of the test's own, with cgroup2
//     mounted read-only at /sys/fs/cgroup and nothing else of the host's
//     cgroup mounts visible (a private mount namespace);
//   - a PID namespace of its own, with /proc mounted for it;
//   - Docker's default capability set (no CAP_SYS_ADMIN), by setpriv's
//     bounding set, so root inside cannot remount or write the cgroupfs;
//   - a seccomp filter (test/fixtures/seccomp-container.c) that answers
//     clone3 with ENOSYS and namespace flags (CLONE_NEWUSER, CLONE_NEWPID, ...),
//     unshare and setns with EPERM; and, for Docker < 20.10, pidfd_open,
//     pidfd_send_signal and pidfd_getfd with EPERM too.
// The escape and harness-death scenarios (test/fixtures/oldhosts/scenarios.cjs)
// run in the tier `auto` picks there; without pidfds each tier that needs
// them must say it is unavailable, and a call must never hang nor report a
// clean stop while its tree runs on. Outcomes are proved by /proc scans.
// Skipped, saying why, without root or the tools; not in CI
// (PROCTREE_REQUIRE_OLDHOSTS=1).
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { expectStoppedAfterRunning, ownCgroupDir, parseScenarioOutput, removeCgroupTree, requireOldhosts, root, type ScenarioEnv, type ScenarioResult } from './oldhosts';

// Docker's default capabilities (moby's oci/caps/defaults.go), as setpriv names them.
const DOCKER_CAPS = [
  'chown', 'dac_override', 'fsetid', 'fowner', 'mknod', 'net_raw', 'setgid', 'setuid',
  'setfcap', 'setpcap', 'net_bind_service', 'sys_chroot', 'kill', 'audit_write',
];
const scenariosScript = path.join(root, 'test', 'fixtures', 'oldhosts', 'scenarios.cjs');

function which(cmd: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(':')) if (fs.existsSync(path.join(dir, cmd))) return path.join(dir, cmd);
  return null;
}

function missing(): string | null {
  if (process.platform !== 'linux') return 'Linux only';
  if (process.getuid?.() !== 0) return 'namespaces, mounts and cgroups need root';
  for (const cmd of ['cc', 'unshare', 'setpriv', 'mount']) if (!which(cmd)) return `${cmd} is not installed`;
  if (!ownCgroupDir()) return 'no cgroup2 mount';
  return null;
}
const why = missing();
if (why && !requireOldhosts) console.warn(`restricted-container tests skipped: ${why}`);

// Runs in the test's own cgroup: $1 that cgroup, then the command. The
// namespaces end with their init (the inner sh); unshare's --kill-child
// takes everything down if the test kills unshare on a timeout.
const CONTAIN = `
set -eu
echo $$ > "$1/cgroup.procs"
shift
exec unshare --mount --propagation private --cgroup --pid --fork --kill-child=SIGKILL sh -c '
  set -eu
  # The host layout (here cgroup v1 controllers beside cgroup2) is not seen
  # in a container: only its own cgroup2, read-only, at the namespace root.
  umount -R -l /sys/fs/cgroup 2>/dev/null || true
  mount -t cgroup2 -o ro,nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
  mount -t proc -o nosuid,nodev,noexec proc /proc
  caps="$1"; shift
  # Not exec: this shell stays PID 1 and reaps orphans, as a container init does.
  setpriv --bounding-set=-all,$caps --inh-caps=-all -- "$@"
' contain "$@"
`;

let work = '';
let seccomp = '';
let leaf = '';

interface ContainedRun {
  status: number | null;
  signal: NodeJS.Signals | null;
  output: string;
  env: ScenarioEnv | null;
  results: Map<string, ScenarioResult>;
  capEff: string;
}

/** scenarios.cjs on the package in this checkout, inside the restricted container. */
function contained(names: string[], opts: { noPidfd: boolean; timeoutMs: number }): ContainedRun {
  const caps = DOCKER_CAPS.map((c) => `+${c}`).join(',');
  const inner = [seccomp, ...(opts.noPidfd ? ['--no-pidfd'] : []), 'sh', '-c',
    'grep CapEff /proc/self/status; exec "$@"', 'harness', process.execPath, scenariosScript, root, ...names];
  const res = spawnSync('sh', ['-c', CONTAIN, 'contain', leaf, caps, ...inner], {
    encoding: 'utf8',
    timeout: opts.timeoutMs,
    killSignal: 'SIGKILL',
    env: { ...process.env, PROCTREE_SCENARIO_MS: String(Math.floor(opts.timeoutMs / 2)) },
  });
  // Whatever the run left in the test's cgroup (a hang killed above).
  try {
    fs.writeFileSync(path.join(leaf, 'cgroup.kill'), '1');
  } catch {
    // no cgroup.kill on this kernel: the PID namespace's end took them down
  }
  const parsed = parseScenarioOutput(res.stdout ?? '');
  return {
    status: res.status,
    signal: res.signal,
    output: `${res.stdout}\n${res.stderr}`,
    ...parsed,
    capEff: /CapEff:\s*(\S+)/.exec(res.stdout ?? '')?.[1] ?? '',
  };
}

describe.skipIf(why !== null && !requireOldhosts)('in a restricted container (ro cgroup2, Docker capabilities and seccomp)', () => {
  beforeAll(() => {
    if (why) throw new Error(`PROCTREE_REQUIRE_OLDHOSTS=1, but ${why}`);
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-restricted-'));
    seccomp = path.join(work, 'seccomp-container');
    execFileSync('cc', ['-O2', '-o', seccomp, path.join(root, 'test', 'fixtures', 'seccomp-container.c')]);
    fs.chmodSync(work, 0o755);
    leaf = path.join(ownCgroupDir() as string, `ptest-restricted-${process.pid}-${randomBytes(4).toString('hex')}`);
    fs.mkdirSync(leaf);
  });

  afterAll(() => {
    if (leaf) removeCgroupTree(leaf);
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  describe('Docker >= 20.10 (pidfds allowed)', () => {
    const names = ['double-fork-setsid', 'nohup-disown', 'trapped-term', 'main-exits-leaving-daemon', 'harness-sigkill', 'harness-sigterm'];
    let run: ContainedRun;
    beforeAll(() => {
      run = contained(names, { noPidfd: false, timeoutMs: 120_000 });
      for (const r of run.results.values()) console.log(`restricted ${r.name}: ${r.ok ? 'pass' : 'FAIL'} (${r.ms} ms, ${r.confinement ?? '-'}) ${r.detail}`);
      if (!run.env) throw new Error(`the harness did not start (${run.status ?? run.signal}):\n${run.output}`);
    }, 150_000);

    it('really is restricted: no CAP_SYS_ADMIN, cgroup2 read-only at the namespace root, no namespaces, no clone3', () => {
      // CAP_SYS_ADMIN is bit 21.
      expect((BigInt(`0x${run.capEff}`) >> 21n) & 1n).toBe(0n);
      expect(run.env?.cgroup2Mounts).toEqual(['/sys/fs/cgroup']);
      expect(run.env?.probes.delegation).toMatch(/EROFS/);
      expect(run.env?.probes.userns).not.toBe(true);
      expect(run.env?.probes.pidns).toMatch(/EPERM/);
      expect(run.env?.probes.clone3).toMatch(/ENOSYS/);
    });

    it("auto picks subreaper, the strongest tier these conditions allow", () => {
      expect(run.env?.tier).toBe('subreaper');
      expect(run.env?.probes.pidfd).toBe(true);
    });

    it.each(names)('%s: nothing survives', (name) => {
      const r = run.results.get(name);
      expect(r, `no result for ${name}:\n${run.output}`).toBeDefined();
      expect(r?.ok, r?.detail).toBe(true);
      // Seen running first (the positive control), then none left.
      expectStoppedAfterRunning(r, run.output);
      if (r?.confinement) expect(r.confinement).toBe('subreaper');
    });
  });

  describe('Docker < 20.10 (pidfd_open, pidfd_send_signal refused with EPERM)', () => {
    // One harness per scenario: a hang in one must not hide the others' outcome.
    const names = ['tier-cgroup', 'tier-pidns', 'tier-subreaper', 'timeout-call', 'terminate-settles'];
    const runs = new Map<string, ContainedRun>();
    beforeAll(() => {
      for (const name of names) {
        // A scenario takes well under a second when it works.
        const r = contained([name], { noPidfd: true, timeoutMs: 12_000 });
        runs.set(name, r);
        const res = r.results.get(name);
        console.log(
          `restricted, no pidfd, ${name} (auto: ${r.env ? String(r.env.tier) : 'no env line'}): ` +
            (res ? `${res.ok ? 'pass' : 'FAIL'} (${res.ms} ms) ${res.detail}` : `no outcome: harness ${r.signal ? `killed (${r.signal}) after 12 s` : `exited ${r.status}`}`),
        );
      }
    }, 120_000);

    it('capabilities() sees pidfds refused, and auto does not pick a tier that needs them', () => {
      const env = runs.get('tier-cgroup')?.env;
      expect(env, runs.get('tier-cgroup')?.output).toBeTruthy();
      expect(env?.probes.pidfd).toMatch(/EPERM/);
      expect(env?.probes.pidfdSendSignal).toMatch(/EPERM/);
      expect(['cgroup', 'pidns', 'subreaper']).not.toContain(env?.tier);
    });

    // The first probe that fails is named: the read-only cgroupfs and the
    // seccomp filter already rule out cgroup and pidns; subreaper needs pidfds.
    it.each([
      ['tier-cgroup', /unavailable: .*(delegation: EROFS|pidfd)/],
      ['tier-pidns', /unavailable: .*(pidns: EPERM|pidfd)/],
      ['tier-subreaper', /unavailable: .*pidfd: EPERM/],
    ])('%s: ConfinementUnavailableError naming why, not a hang', (name, reason) => {
      const r = runs.get(name);
      const res = r?.results.get(name);
      expect(res, `no outcome (hang?):\n${r?.output}`).toBeDefined();
      expect(res?.ok, res?.detail).toBe(true);
      expect(res?.detail).toMatch(reason);
      expectStoppedAfterRunning(res, r?.output ?? '');
    });

    it.each(['timeout-call', 'terminate-settles'])('%s with confinement auto: settles, and either refuses or stops the whole tree', (name) => {
      const r = runs.get(name);
      const res = r?.results.get(name);
      expect(res, `no outcome within 12 s (the harness hung and was killed):\n${r?.output.slice(-3000)}`).toBeDefined();
      expect(res?.ok, res?.detail).toBe(true);
      expectStoppedAfterRunning(res, r?.output ?? '');
    });
  });
});
