// `proctree doctor`: capabilities() as a table a person can act on. The
// rendering is generic over the entries capabilities() returns, so probes the
// library adds later show up without a change here; only the advice is keyed
// by probe name.
import { parseFlags } from './args';

export const doctorHelp = `Usage: proctree doctor [--json]

Shows what this host allows: each probe proctree ran, whether it works, and
for each missing piece the error and what you can do about it; and which
confinement tier 'auto' picks.

Options:
  --json       print capabilities() as JSON
  -h, --help   show this help

Exit status: 0 when the tier 'auto' picks is usable here, 1 when it is not.
`;

/** One probe, the shape capabilities() reports for each thing it tried. */
export interface ProbeEntry {
  ok: boolean;
  errno?: string;
  detail?: string;
}

interface Advice {
  /** What to do when the probe failed, whatever the errno. */
  fix: string;
  /** A better fix for a particular errno. */
  byErrno?: Readonly<Record<string, string>>;
}

const rebuild = 'reinstall so a prebuilt binary for this platform is used, or build it: `npm rebuild proctree` (needs python3, make and a C++ compiler)';

const delegate = 'run under `systemd-run --user --scope -p Delegate=yes <command>`, or in a container started with its own writable cgroup namespace';

/** Advice keyed by probe name; unknown probes are still listed, without it. */
export const advice: Readonly<Record<string, Advice>> = {
  addon: { fix: rebuild },
  cgroup2: {
    fix: 'mount the unified hierarchy (`mount -t cgroup2 none /sys/fs/cgroup`) or boot with systemd.unified_cgroup_hierarchy=1',
    byErrno: { EACCES: delegate, EPERM: delegate, EROFS: `the cgroup filesystem is read-only here: ${delegate}`, ENOENT: 'no cgroup2 mount in /proc/self/mountinfo: mount the unified hierarchy (`mount -t cgroup2 none /sys/fs/cgroup`)' },
  },
  delegation: { fix: delegate },
  cgroupWrite: { fix: delegate },
  clone3: { fix: 'Linux >= 5.7 creates children straight into their cgroup (CLONE_INTO_CGROUP); older kernels use clone() and a move, with a short window' },
  cloneIntoCgroup: { fix: 'Linux >= 5.7 creates children straight into their cgroup (CLONE_INTO_CGROUP); older kernels use clone() and a move, with a short window' },
  pidfd: { fix: 'Linux >= 5.3 (pidfd_open) signals by pidfd, immune to pid reuse; a seccomp profile that blocks pidfd_open must allow it' },
  pidfdOpen: { fix: 'Linux >= 5.3 (pidfd_open) signals by pidfd, immune to pid reuse; a seccomp profile that blocks pidfd_open must allow it' },
  freeze: { fix: 'Linux >= 5.2 has cgroup.freeze: without it a member forking during the ladder can be missed on the first pass' },
  cgroupKill: { fix: 'Linux >= 5.14 has cgroup.kill; older kernels get SIGKILL to each member in a loop' },
  pidns: {
    fix: 'needs a new PID namespace: allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1` or `user.max_user_namespaces`>0), or run with CAP_SYS_ADMIN',
    byErrno: { EPERM: 'user namespaces are blocked here (sysctl, AppArmor `kernel.apparmor_restrict_unprivileged_userns=0`, or a seccomp profile): allow them, or use the cgroup tier' },
  },
  userns: { fix: 'allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`, `user.max_user_namespaces`>0)' },
  subreaper: { fix: 'prctl(PR_SET_CHILD_SUBREAPER) needs Linux >= 3.4, and the proctree-helper executable next to the addon' },
  pidfdSendSignal: { fix: 'Linux >= 5.1 (pidfd_send_signal); a seccomp profile that blocks it must allow it' },
  helper: { fix: `the proctree-helper executable must sit next to proctree.node (it ships in each prebuild folder): ${rebuild}` },
  pgroup: { fix: 'process groups are always available; this tier cannot catch setsid escapes' },
};

type Row = { kind: 'probe'; name: string; probe: ProbeEntry } | { kind: 'info'; name: string; value: string };

function isProbe(v: unknown): v is ProbeEntry {
  return typeof v === 'object' && v !== null && typeof (v as { ok?: unknown }).ok === 'boolean';
}

function isProbeGroup(v: unknown): v is Record<string, ProbeEntry> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const values = Object.values(v);
  return values.length > 0 && values.every(isProbe);
}

function errnoOf(message: string): string | undefined {
  return /\b(E[A-Z0-9]{2,})\b/.exec(message)?.[1];
}

function show(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (typeof v === 'object') {
    return Object.entries(v as Record<string, unknown>)
      .map(([k, x]) => `${k}=${typeof x === 'object' && x !== null ? JSON.stringify(x) : String(x)}`)
      .join(' ');
  }
  return String(v);
}

/**
 * Every entry of capabilities(), as a probe when it has `ok` (or as one probe
 * per member of an object made only of such entries), else as information. An entry `X` that is null beside an `XError` string (today's
 * cgroup2/cgroup2Error) is folded into one failed probe `X`.
 */
export function rows(caps: Readonly<Record<string, unknown>>): Row[] {
  const out: Row[] = [];
  for (const [name, value] of Object.entries(caps)) {
    if (name.endsWith('Error') && name.slice(0, -5) in caps) continue;
    const error = caps[`${name}Error`];
    if (isProbe(value)) {
      out.push({ kind: 'probe', name, probe: value });
    } else if (isProbeGroup(value)) {
      // A group of probes (e.g. `probes: { pidfd: {ok…}, … }`): each is a row.
      for (const [child, probe] of Object.entries(value)) out.push({ kind: 'probe', name: child, probe });
    } else if (`${name}Error` in caps) {
      const ok = value !== null && value !== undefined && value !== false;
      const probe: ProbeEntry = { ok };
      if (!ok && typeof error === 'string') {
        probe.detail = error;
        const errno = errnoOf(error);
        if (errno) probe.errno = errno;
      } else if (ok) {
        probe.detail = show(value);
      }
      out.push({ kind: 'probe', name, probe });
    } else {
      out.push({ kind: 'info', name, value: show(value) });
    }
  }
  return out;
}

export function adviceFor(name: string, probe: ProbeEntry): string | undefined {
  const a = advice[name];
  if (!a) return undefined;
  return (probe.errno && a.byErrno?.[probe.errno]) || a.fix;
}

/** Whether the tier 'auto' picks can run: no failed probe named for it or for the cgroup it needs. */
export function tierUsable(caps: Readonly<Record<string, unknown>>): boolean {
  const tier = caps.tier;
  if (typeof tier !== 'string' || tier === '') return false;
  const needed = tier === 'cgroup' ? [tier, 'cgroup2', 'delegation'] : [tier];
  return !rows(caps).some((r) => r.kind === 'probe' && needed.includes(r.name) && !r.probe.ok);
}

export function renderDoctor(caps: Readonly<Record<string, unknown>>): string {
  const all = rows(caps);
  const width = Math.max(...all.map((r) => r.name.length), 4);
  const lines: string[] = [];
  // What the host is first, then what works and what to do about what does not.
  for (const r of all) if (r.kind === 'info') lines.push(`  ${''.padEnd(4)}  ${r.name.padEnd(width)}  ${r.value}`);
  for (const r of all) {
    if (r.kind !== 'probe') continue;
    const { errno, detail } = r.probe;
    const why = errno && detail && !detail.startsWith(errno) ? `${errno}: ${detail}` : detail ?? errno ?? '';
    lines.push(`  ${(r.probe.ok ? 'ok' : 'FAIL').padEnd(4)}  ${r.name.padEnd(width)}  ${why}`.trimEnd());
    const fix = r.probe.ok ? undefined : adviceFor(r.name, r.probe);
    if (fix) lines.push(`${' '.repeat(width + 10)}fix: ${fix}`);
  }
  const tier = typeof caps.tier === 'string' && caps.tier !== '' ? caps.tier : null;
  lines.push('');
  if (tier === null) lines.push('auto picks: nothing, no tier can run here (see FAIL above)');
  else lines.push(tierUsable(caps) ? `auto picks: ${tier}` : `auto picks: ${tier}, which cannot run here (see FAIL above)`);
  return `${lines.join('\n')}\n`;
}

export async function doctorCommand(argv: string[]): Promise<number> {
  const { flags } = parseFlags(argv, { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } });
  if (flags.help) {
    process.stdout.write(doctorHelp);
    return 0;
  }
  let caps: Record<string, unknown>;
  try {
    // Loaded here, not at the top: a binary that does not load is exactly
    // what doctor must be able to report.
    const { capabilities } = await import('../capabilities');
    caps = capabilities() as unknown as Record<string, unknown>;
  } catch (err) {
    const e = err as Error & { code?: string };
    caps = { addon: { ok: false, ...(e.code ? { errno: e.code } : {}), detail: e.message.split('\n')[0] }, tier: null };
  }
  process.stdout.write(flags.json ? `${JSON.stringify(caps, null, 2)}\n` : renderDoctor(caps));
  return tierUsable(caps) ? 0 : 1;
}
