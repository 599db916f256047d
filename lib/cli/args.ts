// Argument handling shared by the commands: Node's own parseArgs, durations
// written the way people write them, and one error type for "you typed it
// wrong", which every command turns into a one-line message and exit 2.
import { parseArgs, type ParseArgsConfig } from 'node:util';

/** Exit status for a usage error (a bad flag or value), as getopt tools use. */
export const EXIT_USAGE = 2;

export class UsageError extends Error {
  readonly code = 'ERR_PROCTREE_USAGE';
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

type Options = NonNullable<ParseArgsConfig['options']>;
export type Flags = Record<string, string | boolean | undefined>;

/**
 * parseArgs in strict mode, its errors turned into UsageErrors. `default` and
 * `tokens` are left out: they need Node 18.11/18.7 and engines says 18.
 */
export function parseFlags(args: string[], options: Options, allowPositionals = false): { flags: Flags; positionals: string[] } {
  if (typeof parseArgs !== 'function') throw new UsageError('this Node.js has no util.parseArgs: Node >= 18.3 is needed');
  try {
    const { values, positionals } = parseArgs({ args, options, strict: true, allowPositionals });
    return { flags: values as Flags, positionals };
  } catch (err) {
    // parseArgs explains some errors over three lines: keep the first.
    throw new UsageError((err as Error).message.split('\n')[0]);
  }
}

const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * `500ms`, `30s`, `1.5s`, `5m`, `1h`, or a plain number of milliseconds, to
 * whole milliseconds. `0` means "never" where the option allows it.
 */
export function parseDuration(text: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new UsageError(`${flag}: '${text}' is not a duration (examples: 500ms, 30s, 5m, or milliseconds)`);
  const ms = Math.round(Number(m[1]) * units[m[2] ?? 'ms']);
  if (ms > 2 ** 31 - 1) throw new UsageError(`${flag}: '${text}' is longer than 24 days`);
  return ms;
}

const sizes: Record<string, number> = { '': 1, b: 1, k: 1024, kib: 1024, m: 1024 ** 2, mib: 1024 ** 2, g: 1024 ** 3, gib: 1024 ** 3 };

/** `4096`, `64k`, `1MiB`, `2m`: a byte count (k, m, g are powers of 1024). */
export function parseSize(text: string, flag: string): number {
  const m = /^(\d+)\s*([a-z]*)$/i.exec(text.trim());
  const unit = m ? sizes[m[2].toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new UsageError(`${flag}: '${text}' is not a size (examples: 4096, 64k, 1MiB)`);
  const n = Number(m[1]) * unit;
  if (!Number.isSafeInteger(n)) throw new UsageError(`${flag}: '${text}' is too large`);
  return n;
}

/**
 * Splits `[flags…] [--] CMD ARGS…` like timeout(1) does: flags end at `--` or
 * at the first word that is not a flag, so `proctree run ls -l` keeps `-l`
 * for ls. `withValue` names the flags that take the next word as their value.
 */
export function splitCommand(args: string[], withValue: ReadonlySet<string>): { own: string[]; command: string[] } {
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--') return { own: args.slice(0, i), command: args.slice(i + 1) };
    if (!a.startsWith('-') || a === '-') return { own: args.slice(0, i), command: args.slice(i) };
    if (withValue.has(a)) i += 1;
  }
  return { own: args, command: [] };
}

let version: string | undefined;

/** The package's version (`proctree --version`, the server's capabilities answer), read once. */
export function packageVersion(): string {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  version ??= (require('../../../package.json') as { version: string }).version;
  return version;
}

export function flagString(flags: Flags, name: string): string | undefined {
  const v = flags[name];
  return typeof v === 'string' ? v : undefined;
}
