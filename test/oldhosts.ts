// Shared by the older-host tests (test/bullseye.test.ts, test/oldkernel.test.ts,
// test/restricted.test.ts) and the VM tests (test/vm.test.ts, test/limits-vm.test.ts): the Debian 11
// fixture that scripts/bullseye-rootfs.sh builds, the package as `npm pack`
// makes it, commands run in a chroot of that root filesystem, and commands
// run in a VM by scripts/vm.sh (runVm).
//
// A chroot runs inside `unshare --mount --pid --fork --kill-child`: its /proc,
// /sys (with the cgroup2 mount below it), /dev and work-folder mounts exist
// only in that private mount namespace, and everything it started lives in a
// PID namespace of its own. However the command ends (exit, timeout, a test
// failure), the kernel drops those mounts and kills what is left when the
// namespace's init dies; no umount step can be forgotten.
import { execFileSync, spawn, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

export const root = path.resolve(__dirname, '..');
/** CI sets this: a fixture that cannot be built fails the run instead of skipping. */
export const requireOldhosts = process.env.PROCTREE_REQUIRE_OLDHOSTS === '1';

export interface BullseyeFixture {
  dir: string;
  rootfs: string;
  vmlinuz: string;
  baseCpio: string;
  /** What went in: Debian, glibc, Node, kernel versions and the mirror. */
  info: string;
}

function which(cmd: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    const p = path.join(dir, cmd);
    if (fs.existsSync(p)) return p;
  }
  return null;
}

/** The built fixture, or why there is none (and how to build it). */
export function bullseyeFixture(): { fixture: BullseyeFixture | null; why: string | null } {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    return { fixture: null, why: `the fixture is x86-64 Linux; this is ${process.platform}-${process.arch}` };
  }
  if (process.getuid?.() !== 0) return { fixture: null, why: 'chroot and mount namespaces need root' };
  for (const cmd of ['unshare', 'chroot', 'mount']) if (!which(cmd)) return { fixture: null, why: `${cmd} is not installed` };
  const dir = execFileSync('bash', [path.join(root, 'scripts', 'bullseye-rootfs.sh'), '--print-dir'], { encoding: 'utf8' }).trim();
  const complete = path.join(dir, 'complete');
  if (!fs.existsSync(complete)) {
    return { fixture: null, why: `no Debian 11 fixture at ${dir} (build it: bash scripts/bullseye-rootfs.sh, as root, ~1 min)` };
  }
  return {
    fixture: {
      dir,
      rootfs: path.join(dir, 'rootfs'),
      vmlinuz: path.join(dir, 'vmlinuz'),
      baseCpio: path.join(dir, 'base.cpio'),
      info: fs.readFileSync(complete, 'utf8').trim(),
    },
    why: null,
  };
}

/** npm as the running node's own (under `npm test`, the npm that runs us). */
export function npmCli(): string {
  const candidates = [
    process.env.npm_execpath,
    path.resolve(process.execPath, '..', '..', 'lib', 'node_modules', 'npm', 'bin', 'npm-cli.js'),
  ];
  const found = candidates.find((p) => p && p.endsWith('.js') && fs.existsSync(p));
  if (!found) throw new Error('cannot find npm-cli.js');
  return found;
}

/** The package tarball in `dest`, with dist/ and the x64 prebuild built first if missing. */
export function packTarball(dest: string): string {
  if (!fs.existsSync(path.join(root, 'dist', 'cjs', 'index.js'))) {
    execFileSync(process.execPath, [path.join(root, 'scripts', 'build-ts.js')], { cwd: root, stdio: 'inherit' });
  }
  execFileSync(process.execPath, [path.join(root, 'scripts', 'prebuild.js'), '--arch', 'x64', '--if-missing'], {
    cwd: root,
    stdio: 'inherit',
  });
  const out = execFileSync(
    process.execPath,
    [npmCli(), 'pack', '--ignore-scripts', '--json', '--pack-destination', dest, '--loglevel=error'],
    { cwd: root, encoding: 'utf8' },
  );
  const [info] = JSON.parse(out) as Array<{ filename: string }>;
  return path.join(dest, info.filename);
}

/** The npm cache of this machine (filled by `npm ci`), so installs in the chroot need no network. */
export function hostNpmCache(): string {
  const res = spawnSync(process.execPath, [npmCli(), 'config', 'get', 'cache'], { encoding: 'utf8' });
  return res.stdout.trim() || path.join(process.env.HOME ?? '/root', '.npm');
}

// Runs in the new namespaces, before chroot: $1 rootfs, $2 work folder (seen
// as /mnt inside), $3 npm cache (seen as /mnt/npm-cache), $4 the command.
const CHROOT_SETUP = `
set -eu
R="$1"; W="$2"; C="$3"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mount --bind "$W" "$R/mnt"
if [ -d "$C" ]; then mount --bind "$C" "$R/mnt/npm-cache"; fi
# Not exec: this shell stays PID 1 of the namespace and reaps the orphans
# that reparent to it while it waits (an init that never reaps would leave
# them as zombies, and a harness as PID 1 would become their reaper).
chroot "$R" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME=/root LANG=C.UTF-8 \\
  npm_config_cache=/mnt/npm-cache npm_config_update_notifier=false ${'${PROCTREE_CHROOT_ENV:-}'} /bin/bash -c "$4"
`;

/**
 * `command` (bash) in a chroot of `rootfs`, with `work` mounted at /mnt. It
 * runs in a cgroup of its own below ours, so the harnesses in it make their
 * subtrees there, and whatever a failed run left is killed and removed with
 * it (never another harness's subtree beside ours).
 */
export function inChroot(
  rootfs: string,
  work: string,
  command: string,
  options: { timeoutMs: number; env?: Record<string, string> },
): SpawnSyncReturns<string> {
  fs.mkdirSync(path.join(work, 'npm-cache'), { recursive: true });
  const env: Record<string, string> = { ...options.env };
  // The CA bundle this Node is told to trust (a TLS-inspecting proxy's), for
  // npm's fetches in the chroot, as scripts/vm.sh passes it.
  const ca = process.env.NODE_EXTRA_CA_CERTS;
  if (ca && fs.existsSync(ca) && env.NODE_EXTRA_CA_CERTS === undefined) {
    fs.copyFileSync(ca, path.join(work, 'extra-ca.pem'));
    env.NODE_EXTRA_CA_CERTS = '/mnt/extra-ca.pem';
  }
  const extra = Object.entries(env)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  const own = ownCgroupDir();
  const leaf = own ? path.join(own, `ptest-chroot-${process.pid}-${randomBytes(4).toString('hex')}`) : null;
  if (leaf) fs.mkdirSync(leaf);
  const unshare = ['unshare', '--mount', '--propagation', 'private', '--pid', '--fork', '--kill-child=SIGKILL',
    'sh', '-c', CHROOT_SETUP, 'chroot-setup', rootfs, work, hostNpmCache(), command];
  const res = spawnSync(
    'sh',
    ['-c', 'if [ -n "$1" ]; then echo $$ > "$1/cgroup.procs"; fi; shift; exec "$@"', 'enter', leaf ?? '', ...unshare],
    {
      encoding: 'utf8',
      timeout: options.timeoutMs,
      killSignal: 'SIGKILL',
      env: { ...process.env, PROCTREE_CHROOT_ENV: extra },
      maxBuffer: 64 * 1024 * 1024,
    },
  );
  if (leaf) removeCgroupTree(leaf);
  return res;
}

/** This process's cgroup2 directory (the chroot's harnesses make their subtrees below it). */
export function ownCgroupDir(): string | null {
  const line = fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .find((l) => / - cgroup2 /.test(l));
  const rel = fs
    .readFileSync('/proc/self/cgroup', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('0::'))
    ?.slice(3);
  if (!line || rel === undefined) return null;
  return path.join(line.split(' ')[4], rel);
}

/** cgroup.kill on a cgroup of ours, then rmdir bottom-up. */
export function removeCgroupTree(dir: string): void {
  try {
    fs.writeFileSync(path.join(dir, 'cgroup.kill'), '1');
  } catch {
    // a kernel without cgroup.kill, or gone
  }
  const deadline = Date.now() + 2000;
  const nap = new Int32Array(new SharedArrayBuffer(4));
  const rm = (d: string): void => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) rm(path.join(d, e.name));
    while (Date.now() < deadline) {
      try {
        fs.rmdirSync(d);
        return;
      } catch {
        // still populated for a moment (EBUSY until the last member is gone)
        Atomics.wait(nap, 0, 0, 10);
      }
    }
  };
  try {
    rm(dir);
  } catch {
    // already removed
  }
}

export interface ScenarioResult {
  name: string;
  ok: boolean;
  detail: string;
  ms: number;
  survivors?: number;
  /** How many of the scenario's processes a /proc scan saw running before the stop (the positive control). */
  alive?: number;
  /** The tier said it cannot run here: nothing was started. */
  unavailable?: boolean;
  confinement?: string;
  report?: Record<string, unknown>;
  processes?: number;
  tookMs?: number;
}

export interface ScenarioEnv {
  kernel: string;
  glibc: string | null;
  node: string;
  loaded: string[];
  cgroup2Mounts: string[];
  tier: string;
  rejected: Record<string, string>;
  probes: Record<string, true | string>;
  onPath: string[];
}

/** The PROCTREE-ENV and PROCTREE-SCENARIO lines of test/fixtures/oldhosts/scenarios.cjs, from noisy output. */
export function parseScenarioOutput(text: string): { env: ScenarioEnv | null; results: Map<string, ScenarioResult> } {
  let env: ScenarioEnv | null = null;
  const results = new Map<string, ScenarioResult>();
  for (const line of text.split(/\r?\n/)) {
    const e = /PROCTREE-ENV (\{.*\})\s*$/.exec(line);
    if (e) env = JSON.parse(e[1]) as ScenarioEnv;
    const s = /PROCTREE-SCENARIO (\{.*\})\s*$/.exec(line);
    if (s) {
      const r = JSON.parse(s[1]) as ScenarioResult;
      results.set(r.name, r);
    }
  }
  return { env, results };
}

/**
 * A scenario's outcome is proof only if its tree was seen running before the
 * stop (alive > 0) and a number of survivors was counted after it (0): "no
 * survivors" of a tree that never started would pass by itself. A tier that
 * said it is unavailable started nothing, and has neither.
 */
export function expectStoppedAfterRunning(r: ScenarioResult | undefined, output: string): void {
  if (!r) throw new Error(`no result:\n${output}`);
  if (r.unavailable) return;
  if (!(typeof r.alive === 'number' && r.alive > 0)) throw new Error(`${r.name}: its tree was never seen running (alive ${r.alive}): ${r.detail}`);
  if (r.survivors !== 0) throw new Error(`${r.name}: survivors ${r.survivors}: ${r.detail}`);
}

/** CI sets this: a VM of scripts/vm.sh that cannot be booted fails the run instead of skipping. */
export const requireVm = process.env.PROCTREE_REQUIRE_VM === '1';

export type VmKernel = '5.10' | '6.1';

/**
 * Why scripts/vm.sh cannot boot `kernel` here, saying how to make it
 * possible, or null. It needs the Debian 11 fixture (its root filesystem and
 * its 5.10 kernel) and, for 6.1, Debian 12's kernel fetched by
 * scripts/debian-kernel.sh; vm.sh would build both itself, but a test only
 * boots what is there.
 */
export function vmUnavailable(kernel: VmKernel): string | null {
  const { why } = bullseyeFixture();
  if (why) return why;
  for (const cmd of ['qemu-system-x86_64', 'cpio']) if (!which(cmd)) return `${cmd} is not installed (apt-get install qemu-system-x86 cpio)`;
  if (kernel === '6.1') {
    const vmlinuz = execFileSync('bash', [path.join(root, 'scripts', 'debian-kernel.sh'), kernel, '--print-path'], { encoding: 'utf8' }).trim();
    if (!fs.existsSync(path.join(path.dirname(vmlinuz), 'complete'))) {
      return `no Debian 12 kernel at ${vmlinuz} (fetch it: bash scripts/debian-kernel.sh 6.1, a few seconds)`;
    }
  }
  return null;
}

export interface VmRun {
  /** COMMAND's exit status; 124: the VM overran its timeout; 125: vm.sh could not build or boot it. */
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  /** COMMAND's stderr, then vm.sh's own lines (`vm.sh: ...`). */
  stderr: string;
  ms: number;
}

/**
 * `scripts/vm.sh --kernel K --timeout S [--layout L] [--add H:G]... -- command...`:
 * one VM, bounded by vm.sh (which kills its qemu by pid); vm.sh itself is
 * stopped (SIGTERM, then SIGKILL) if it overruns by minutes (packing and
 * installing the package come before the boot).
 */
export function runVm(
  options: { kernel: VmKernel; timeoutS: number; layout?: 'leaf' | 'inner'; adds?: Array<[string, string]> },
  command: string[],
): Promise<VmRun> {
  const args = [path.join(root, 'scripts', 'vm.sh'), '--kernel', options.kernel, '--timeout', String(options.timeoutS)];
  if (options.layout) args.push('--layout', options.layout);
  for (const [host, guest] of options.adds ?? []) args.push('--add', `${host}:${guest}`);
  args.push('--', ...command);
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const vm = spawn('bash', args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    vm.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    vm.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    let kill: NodeJS.Timeout | undefined;
    const term = setTimeout(() => {
      vm.kill('SIGTERM');
      kill = setTimeout(() => vm.kill('SIGKILL'), 10_000);
    }, (options.timeoutS + 600) * 1000);
    vm.on('error', reject);
    vm.on('close', (status, signal) => {
      clearTimeout(term);
      if (kill) clearTimeout(kill);
      resolve({ status, signal, stdout, stderr, ms: Date.now() - started });
    });
  });
}
