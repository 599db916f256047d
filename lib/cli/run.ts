// `proctree run`: timeout(1) for a whole process tree. Everything here is the
// public API (spawn, terminate, done); this file only maps flags and statuses.
import { constants as osConstants } from 'node:os';

import { spawn } from '../default-supervisor';
import { tiers } from '../tiers';
import { formatListener, resolveReady, type ResolvedReady } from '../ports';
import { watchReady } from '../call/state';
import type { Limits } from '../types';
import type { ToolCall } from '../toolcall';
import type { CleanupReport, ResourceUsage, RunResult, SpawnOptions } from '../types';
import { type Flags, flagString, parseDuration, parseFlags, parseSize, splitCommand, UsageError } from './args';
import { attachTerminal, terminalOptions } from './terminal';

export const runHelp = `Usage: proctree run [options] [--] COMMAND [ARG...]

Runs COMMAND in its own cgroup and, when it ends, times out or this command
is interrupted, stops everything it started (double-forked daemons, nohup'd
children, processes that ignore SIGTERM) and proves the tree is empty.

Options:
  --timeout DURATION    stop the whole tree after DURATION (0 = never; default 0)
  --grace DURATION      from the graceful signal to SIGKILL (default 2s)
  --signal SIG          the graceful signal (default SIGTERM)
  --confinement TIER    ${['auto', ...tiers].join(' | ')} (default auto;
                        the library rejects the tiers this host or version lacks)
  --leftovers MODE      when COMMAND exits with descendants alive: kill (default)
                        runs the ladder on them; wait keeps going until they end
  --seal                run COMMAND sealed in its cgroup leaf: namespaces of its own,
                        no capability, cannot leave its leaf or see this process
                        (fails rather than run unsealed where it cannot be had)
  --pty                 run COMMAND on a terminal of its own (a pseudo-terminal),
                        like script(1): on a terminal, keys go to COMMAND raw and
                        its window follows this one; else bytes are piped through
  --idle-timeout DURATION
                        stop the whole tree after DURATION without any output
                        (a command waiting for input); exit status 124
  --ready-port PORT     say on stderr when something of the tree listens on
                        TCP or UDP port PORT (a dev server is up):
                        'proctree: ready tcp 127.0.0.1:PORT (pid N)'
  --ready-timeout DURATION
                        with --ready-port: stop the whole tree when nothing
                        listens on PORT after DURATION; exit status 124
  --max-output SIZE     keep at most SIZE bytes of stdout and of stderr and
                        print them when COMMAND is done, with a line saying how
                        many bytes were left out (SIZE: 4096, 64k, 1MiB)
  --keep PART           with --max-output: head, tail, or both (default: both,
                        the start and the end, where errors and summaries are)
  --all                 stdout and stderr merged on stdout in arrival order
  --memory SIZE         the whole tree's memory limit (memory.max, no swap):
                        past it the kernel OOM-kills a process of the tree
                        (SIZE: 512M, 2G, bytes)
  --pids N              at most N processes and threads at once (pids.max):
                        forks past it fail
  --cpu CPUS            at most CPUS processors' worth of CPU time (cpu.max):
                        0.5, 1.5, 4
  --report              print the cleanup report to stderr on one line
  --usage               print the CPU time and peak processes of the whole
                        tree to stderr on one line
  --json                print the whole result as JSON on stdout instead of
                        passing COMMAND's output through
  -h, --help            show this help

DURATION is 500ms, 30s, 5m, 1h or a number of milliseconds.

The limits need the cgroup tier with the memory, pids and cpu controllers
(see 'proctree doctor'); where one is missing COMMAND is not run (status 125).
When the tree hit one, a line on stderr says so ('proctree: out of memory:
...', 'proctree: process limit: ...').

Exit status: COMMAND's own; 128+N when signal N ended it; 124 on --timeout;
125 when proctree itself failed (processes survived the ladder); 126 when
COMMAND cannot be executed, 127 when it is not found; 2 for a usage error.
SIGINT, SIGTERM and SIGHUP stop the tree, then exit with COMMAND's status.
A command's leftovers cannot be kept as a job here (this process ends with
the command): use the library or \`proctree serve\` for that.
`;

const runOptions = {
  timeout: { type: 'string' },
  grace: { type: 'string' },
  signal: { type: 'string' },
  confinement: { type: 'string' },
  leftovers: { type: 'string' },
  'idle-timeout': { type: 'string' },
  'ready-port': { type: 'string' },
  'ready-timeout': { type: 'string' },
  'max-output': { type: 'string' },
  keep: { type: 'string' },
  all: { type: 'boolean' },
  report: { type: 'boolean' },
  usage: { type: 'boolean' },
  json: { type: 'boolean' },
  pty: { type: 'boolean' },
  seal: { type: 'boolean' },
  memory: { type: 'string' },
  pids: { type: 'string' },
  cpu: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

const withValue = new Set([
  '--timeout', '--grace', '--signal', '--confinement', '--leftovers', '--idle-timeout', '--max-output', '--keep', '--ready-port',
  '--ready-timeout', '--memory', '--pids', '--cpu',
]);

export const EXIT_TIMEOUT = 124;
export const EXIT_FAILED = 125;
export const EXIT_CANNOT_INVOKE = 126;
export const EXIT_NOT_FOUND = 127;

/** The status a shell would show for the command, timeout(1)'s 124 first. */
export function exitStatus(result: Pick<RunResult, 'exitCode' | 'signal' | 'timedOut'> & { cleanup?: CleanupReport | null }): number {
  if (result.timedOut || result.cleanup?.reason === 'idle' || result.cleanup?.reason === 'not-ready') return EXIT_TIMEOUT;
  if (result.exitCode !== null) return result.exitCode;
  const num = result.signal ? (osConstants.signals as Record<string, number>)[result.signal] : undefined;
  return num !== undefined ? 128 + num : EXIT_FAILED;
}

export function reportLine(report: CleanupReport | null): string {
  return report ? `proctree: cleanup ${JSON.stringify(report)}` : 'proctree: cleanup not needed, nothing was left';
}

export function usageLine(usage: ResourceUsage): string {
  return `proctree: usage ${JSON.stringify(usage)}`;
}

interface RunPlan {
  file: string;
  args: string[];
  options: SpawnOptions;
  report: boolean;
  usage: boolean;
  json: boolean;
  pty: boolean;
  /** Output goes through our pipes (kept within --max-output, or merged by --all), not straight to the terminal. */
  capture: boolean;
  /** Print the kept output when the command is done (--max-output without --json). */
  printKept: boolean;
  /** --ready-port (and --ready-timeout). */
  ready: ResolvedReady | null;
}

export function planRun(argv: string[]): RunPlan | 'help' {
  const { own, command } = splitCommand(argv, withValue);
  const { flags } = parseFlags(own, runOptions);
  if (flags.help) return 'help';
  if (command.length === 0) throw new UsageError('run: no command given (usage: proctree run [options] -- COMMAND [ARG...])');

  const options: SpawnOptions = {};
  const timeout = flagString(flags, 'timeout');
  if (timeout !== undefined) options.timeout = parseDuration(timeout, '--timeout');
  const grace = flagString(flags, 'grace');
  if (grace !== undefined) options.grace = parseDuration(grace, '--grace');
  const signal = flagString(flags, 'signal');
  if (signal !== undefined) {
    // Accept TERM, SIGTERM and 15, as kill(1) does; the library validates.
    options.killSignal = /^\d+$/.test(signal) ? Number(signal) : ((signal.startsWith('SIG') ? signal : `SIG${signal}`) as NodeJS.Signals);
  }
  const leftovers = flagString(flags, 'leftovers');
  if (leftovers !== undefined) {
    if (leftovers === 'keep') {
      throw new UsageError("--leftovers: keep needs a harness that outlives the command; use the library or 'proctree serve'");
    }
    if (leftovers !== 'kill' && leftovers !== 'wait') throw new UsageError(`--leftovers: '${leftovers}' is not kill or wait`);
    options.leftovers = leftovers;
  }
  const idle = flagString(flags, 'idle-timeout');
  if (idle !== undefined) options.idleTimeout = parseDuration(idle, '--idle-timeout');
  const maxOutput = flagString(flags, 'max-output');
  const keep = flagString(flags, 'keep');
  if (keep !== undefined && maxOutput === undefined) throw new UsageError('--keep: only with --max-output');
  if (maxOutput !== undefined) {
    options.maxBuffer = parseSize(maxOutput, '--max-output');
    // Validated by the library with the other options (a usage error then, as for --confinement).
    options.keep = (keep ?? 'both') as SpawnOptions['keep'];
    options.marker = true;
  }
  const all = flags.all === true;
  if (all) options.all = true;
  const limits = planLimits(flags);
  if (limits) options.limits = limits;
  const confinement = flagString(flags, 'confinement');
  // Passed through unchecked: which tiers exist is the library's business,
  // and it rejects the ones it does not have with ERR_INVALID_ARG_VALUE.
  if (confinement !== undefined) options.confinement = confinement as SpawnOptions['confinement'];
  if (flags.seal === true) options.seal = true;
  let ready: ResolvedReady | null = null;
  const readyPort = flagString(flags, 'ready-port');
  const readyTimeout = flagString(flags, 'ready-timeout');
  if (readyTimeout !== undefined && readyPort === undefined) throw new UsageError('--ready-timeout: only with --ready-port');
  if (readyPort !== undefined) {
    if (!/^\d+$/.test(readyPort)) throw new UsageError(`--ready-port: '${readyPort}' is not a port number`);
    try {
      ready = resolveReady({
        listening: Number(readyPort),
        timeout: readyTimeout === undefined ? undefined : parseDuration(readyTimeout, '--ready-timeout'),
      });
    } catch (err) {
      if (err instanceof UsageError) throw err;
      throw new UsageError(`--ready-port: ${(err as Error).message}`);
    }
  }
  const json = flags.json === true;
  const capture = json || all || maxOutput !== undefined;
  return {
    file: command[0],
    args: command.slice(1),
    options,
    report: flags.report === true,
    usage: flags.usage === true,
    json,
    pty: flags.pty === true,
    capture,
    printKept: !json && maxOutput !== undefined,
    ready,
  };
}

/** --memory, --pids, --cpu as `limits` (the library checks the ranges: a usage error then). */
function planLimits(flags: Flags): Limits | null {
  const limits: Limits = {};
  const memory = flagString(flags, 'memory');
  if (memory !== undefined) limits.memoryBytes = parseSize(memory, '--memory');
  const pids = flagString(flags, 'pids');
  if (pids !== undefined) {
    if (!/^\d+$/.test(pids)) throw new UsageError(`--pids: '${pids}' is not a number of processes`);
    limits.pids = Number(pids);
  }
  const cpu = flagString(flags, 'cpu');
  if (cpu !== undefined) {
    if (!/^(\d+(\.\d*)?|\.\d+)$/.test(cpu)) throw new UsageError(`--cpu: '${cpu}' is not a number of CPUs (examples: 0.5, 2)`);
    limits.cpu = Number(cpu);
  }
  return Object.keys(limits).length > 0 ? limits : null;
}

/** What the kernel's verdicts say, for a person: one line each, or none. */
export function verdictLines(r: Pick<RunResult, 'oomKilled' | 'pidsLimited'>): string[] {
  const lines: string[] = [];
  if (r.oomKilled) lines.push('proctree: out of memory: the kernel killed a process of the tree at its memory limit');
  if (r.pidsLimited) lines.push('proctree: process limit: a fork of the tree was refused at its process limit');
  return lines;
}

function startCall(plan: RunPlan): ToolCall {
  // A terminal is one stream (--all changes nothing); attachTerminal passes it through.
  if (plan.pty) return startOrUsage(plan, { ...plan.options, pty: terminalOptions() });
  const out = plan.capture ? 'pipe' : 'inherit';
  const options: SpawnOptions = { ...plan.options, stdio: ['inherit', out, out] };
  if (plan.options.all && !plan.json && !plan.printKept) {
    // Merged and passed through as it comes.
    options.onOutput = (chunk) => process.stdout.write(chunk);
  }
  return startOrUsage(plan, options);
}

function startOrUsage(plan: RunPlan, options: SpawnOptions): ToolCall {
  try {
    return spawn(plan.file, plan.args, options);
  } catch (err) {
    // Options the library refused (ERR_INVALID_ARG_VALUE, ERR_UNKNOWN_SIGNAL, …)
    // are usage errors of this command.
    throw new UsageError((err as Error).message);
  }
}

function writeOut(text: string): Promise<void> {
  return new Promise((resolve) => process.stdout.write(text, () => resolve()));
}

export async function runCommand(argv: string[]): Promise<number> {
  const plan = planRun(argv);
  if (plan === 'help') {
    await writeOut(runHelp);
    return 0;
  }
  const call = startCall(plan);
  const result = call.done;
  if (plan.ready) {
    const port = plan.ready.listening;
    call.on('ready', (state) => {
      const on = state.listening.filter((l) => l.port === port);
      process.stderr.write(`proctree: ready ${on.map(formatListener).join(', ')}\n`);
    });
    call[watchReady](plan.ready);
  }
  let failed = false;
  call.on('error', (err: Error & { code?: string }) => {
    // A start failure is reported through `done`; anything after it (a
    // ladder that left survivors) is proctree failing, not the command.
    if (call.pid === undefined) return;
    failed = true;
    process.stderr.write(`proctree: ${err.message}\n`);
  });

  const stopTree = (): void => {
    void call.terminate();
  };
  const stopSignals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  for (const s of stopSignals) process.on(s, stopTree);
  // The terminal's output goes straight through unless it is printed at the end (--json, --max-output).
  const detach = plan.pty ? attachTerminal(call, plan.json || plan.printKept) : null;
  try {
    const r = await result;
    if (plan.printKept) {
      if (r.all !== undefined) await writeOut(r.all);
      else {
        await writeOut(r.stdout);
        process.stderr.write(r.stderr);
      }
    }
    for (const line of verdictLines(r)) process.stderr.write(`${line}\n`);
    if (plan.report) process.stderr.write(`${reportLine(r.cleanup)}\n`);
    if (plan.usage) process.stderr.write(`${usageLine(r.usage)}\n`);
    if (plan.json) await writeOut(`${JSON.stringify(r)}\n`);
    if (failed || (r.cleanup?.leftovers.length ?? 0) > 0) return EXIT_FAILED;
    return exitStatus(r);
  } catch (err) {
    const e = err as Error & { code?: string };
    process.stderr.write(`proctree: ${e.message}\n`);
    if (e.code === 'ENOENT') return EXIT_NOT_FOUND;
    if (e.code === 'EACCES' || e.code === 'ENOEXEC' || e.code === 'EISDIR' || e.code === 'ENOTDIR') return EXIT_CANNOT_INVOKE;
    return EXIT_FAILED;
  } finally {
    detach?.();
    for (const s of stopSignals) process.off(s, stopTree);
  }
}
