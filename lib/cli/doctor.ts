// `proctree doctor`: capabilities() as a table a person can act on: every
// probe, what failed and what to do about it, and which tier 'auto' picks.
// The advice depends on where we run (a container needs other fixes than a
// login session).
import fs from 'node:fs';

import type { Capabilities } from '../capabilities';
import type { Probe } from '../tiers';
import { parseFlags } from './args';

export const doctorHelp = `Usage: proctree doctor [--json]

Shows what this host allows: each probe proctree ran, whether it works, and
for each missing piece the error and what you can do about it; and which
confinement tier 'auto' picks.

Options:
  --json       print capabilities() as JSON
  -h, --help   show this help

Exit status: 0 when 'auto' has a tier that runs here, 1 when it has none.
`;

/** Where the host runs us, as far as the advice is concerned. */
export type Host = 'container' | 'host';

/** A container runtime left its mark (Docker, Podman, Kubernetes). */
export function detectHost(exists: (p: string) => boolean = fs.existsSync, env: NodeJS.ProcessEnv = process.env): Host {
  if (exists('/.dockerenv') || exists('/run/.containerenv') || env.KUBERNETES_SERVICE_HOST) return 'container';
  return 'host';
}

const rebuild = 'reinstall so a prebuilt binary for this platform is used, or build it: `npm rebuild proctree` (needs python3, make and a C++ compiler)';

function delegate(host: Host): string {
  return host === 'container'
    ? "in a container, 'subreaper' (or 'pidns') is the expected tier; for the cgroup tier give the container a writable cgroup of its own (Docker: `--cgroupns=private` with cgroup v2, or run it under systemd with Delegate=yes)"
    : 'run under `systemd-run --user --scope -p Delegate=yes <command>` (a delegated cgroup), or as root';
}

/** What to do when a probe failed, by probe name (and errno where it matters). */
export function adviceFor(name: string, probe: Probe, host: Host = 'host'): string | undefined {
  const byName: Record<string, string | undefined> = {
    addon: rebuild,
    cgroup2:
      probe.errno === 'ENOENT'
        ? 'no cgroup2 mount shows this process: mount the unified hierarchy (`mount -t cgroup2 none /sys/fs/cgroup`) or boot with systemd.unified_cgroup_hierarchy=1'
        : delegate(host),
    delegation: probe.errno === 'EROFS' ? `the cgroup filesystem is read-only here: ${delegate(host)}` : delegate(host),
    clone3: 'Linux >= 5.3 has clone3 (a seccomp profile may refuse it: then clone() is used)',
    cloneIntoCgroup:
      probe.errno === 'ECANCELED'
        ? "nothing to do for the calls (their children join their cgroup through cgroup.procs, before exec); to use clone3 again, start the harness in a cgroup that was never killed (not one whose cgroup.kill was written)"
        : 'Linux >= 5.7 creates children straight into their cgroup (CLONE_INTO_CGROUP); older kernels use clone() and a move, with a short window',
    pidfd: 'Linux >= 5.3 (pidfd_open), and a seccomp profile that allows it (Docker >= 20.10): every tier needs it',
    pidfdSendSignal: 'Linux >= 5.1 (pidfd_send_signal), and a seccomp profile that allows it: every tier needs it',
    waitidPidfd: 'Linux >= 5.4 (waitid P_PIDFD): every tier needs it',
    freeze: 'Linux >= 5.2 has cgroup.freeze: without it a member forking during the ladder can be missed on the first pass',
    cgroupKill: 'Linux >= 5.14 has cgroup.kill; older kernels get SIGKILL to each member, frozen, in rounds',
    pidns:
      probe.errno === 'EPERM'
        ? 'user namespaces are refused here (sysctl, AppArmor `kernel.apparmor_restrict_unprivileged_userns=0`, or a seccomp profile): allow them, or use the cgroup tier'
        : 'needs a new PID namespace: allow unprivileged user namespaces (`user.max_user_namespaces` > 0), or CAP_SYS_ADMIN',
    userns: 'allow unprivileged user namespaces (`user.max_user_namespaces` > 0)',
    seal:
      probe.syscall === 'unshare'
        ? 'sealed calls need cgroup namespaces (CONFIG_CGROUPS with namespaces, Linux >= 4.6)'
        : probe.syscall === 'mount'
          ? 'sealed calls mount their own /proc and cgroup2: a /proc with parts masked (a container runtime does this) or a read-only /sys/fs/cgroup mount point refuses it'
          : 'sealed calls need unprivileged user namespaces (`user.max_user_namespaces` > 0; AppArmor `kernel.apparmor_restrict_unprivileged_userns=0`; a seccomp profile that allows CLONE_NEWUSER)',
    subreaper: 'prctl(PR_SET_CHILD_SUBREAPER) needs Linux >= 3.4',
    userManager:
      'the systemd tier needs a systemd user manager (a login session with pam_systemd, or `loginctl enable-linger <user>`) and systemd-run on PATH; it is only used when the own cgroup is not writable',
    helper: `the proctree-helper executable must sit next to proctree.node and run here (it ships in each prebuild folder): ${rebuild}`,
  };
  return byName[name];
}

/** capabilities(), or what doctor knows when the addon does not even load. */
export type DoctorInput = Capabilities | { addon: Probe; tier: null };

export function renderDoctor(caps: DoctorInput, host: Host = detectHost()): string {
  const rows: Array<[string, Probe]> = 'addon' in caps ? [['addon', caps.addon]] : Object.entries(caps.probes);
  const lines: string[] = [];
  const portable = 'addon' in caps ? null : caps.portable ?? null;
  if (!('addon' in caps)) {
    lines.push(`  kernel   ${caps.kernel}`);
    lines.push(`  cgroup2  ${caps.cgroup2 ? `${caps.cgroup2.mount} (own cgroup ${caps.cgroup2.own})` : '-'}`);
    lines.push(`  clone    ${caps.clone}`);
    if (host === 'container') lines.push('  host     a container');
    if (portable) {
      // The portable binding: the Linux probes were not tried, so no fix applies to them one by one.
      lines.push(`  portable ${portable.reason} (no addon; process table: ${portable.processTable})`);
      lines.push(
        portable.reason.startsWith('PROCTREE_PORTABLE')
          ? '           fix: unset PROCTREE_PORTABLE to use the addon and its stronger tiers'
          : "           calls run in the portable tier: a setsid daemon whose parent exited is not stopped, and nothing is verified (README, 'Off Linux')",
      );
    }
    lines.push('');
  }
  const width = Math.max(...rows.map(([name]) => name.length), 4);
  for (const [name, p] of rows) {
    // 'none' exists only without the addon: with it, a FAIL there would only alarm.
    if (name === 'none' && !portable && !p.ok) continue;
    const why = p.errno && p.detail && !p.detail.startsWith(p.errno) ? `${p.errno}: ${p.detail}` : p.detail ?? p.errno ?? '';
    lines.push(`  ${(p.ok ? 'ok' : 'FAIL').padEnd(4)}  ${name.padEnd(width)}  ${why}`.trimEnd());
    const fix = p.ok || portable ? undefined : adviceFor(name, p, host);
    if (fix) lines.push(`${' '.repeat(width + 10)}fix: ${fix}`);
  }
  lines.push('');
  if (caps.tier === null) {
    lines.push('auto picks: nothing, no tier can run here (see FAIL above)');
  } else {
    lines.push(`auto picks: ${caps.tier}`);
    for (const [tier, why] of Object.entries(caps.rejected)) lines.push(`  not ${tier}: ${why}`);
  }
  if (!('addon' in caps) && caps.limits) lines.push(...limitsLines(caps));
  if (!('addon' in caps) && caps.seal) {
    lines.push('', `seal: ${caps.seal.available ? 'available (seal: true runs a call in namespaces of its own)' : `no, ${caps.seal.why ?? 'unavailable'}`}`);
  }
  return `${lines.join('\n')}\n`;
}

/** What `limits` a call can have here, where its cgroups go, and the fix for the rest. */
function limitsLines(caps: Capabilities): string[] {
  const l = caps.limits;
  const each = (['memory', 'pids', 'cpu'] as const).map((c) => `${c} ${l[c] ? 'ok' : 'no'}`).join(', ');
  const own = caps.cgroup2?.ownPath;
  const where = l.cgroup && own && l.cgroup !== own ? ` (subtrees in ${l.cgroup}, beside this process's leaf ${own})` : '';
  const lines = ['', `limits: ${each}${where}`];
  if (l.reason) lines.push(`  fix: ${l.reason}`);
  return lines;
}

export async function doctorCommand(argv: string[]): Promise<number> {
  const { flags } = parseFlags(argv, { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } });
  if (flags.help) {
    process.stdout.write(doctorHelp);
    return 0;
  }
  let caps: DoctorInput;
  try {
    // Loaded here, not at the top: a binary that does not load is exactly
    // what doctor must be able to report.
    const { capabilities } = await import('../capabilities');
    caps = capabilities();
  } catch (err) {
    const e = err as Error & { code?: string };
    caps = { addon: { ok: false, ...(e.code ? { errno: e.code } : {}), detail: e.message.split('\n')[0] }, tier: null };
  }
  process.stdout.write(flags.json ? `${JSON.stringify(caps, null, 2)}\n` : renderDoctor(caps));
  return caps.tier === null ? 1 : 0;
}
