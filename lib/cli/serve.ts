// `proctree serve`: the API over JSON lines on stdin/stdout (docs/protocol.md),
// for harnesses written in other languages. This file is the command: its
// flags, the operator's limits (what a client may ask kept, how much may wait
// on stdout), and a ProtocolServer on the process's stdin and stdout that a
// stop signal stops too.
import { parseFlags, parseSize, UsageError } from './args';
import { DEFAULT_LIMITS, ProtocolServer, type ServerLimits } from './serve-session';

export { DEFAULT_LIMITS, ProtocolServer, type ServerIo, type ServerLimits } from './serve-session';

export const serveHelp = `Usage: proctree serve [--max-buffer SIZE] [--max-queued SIZE]

Speaks the JSON-lines protocol of docs/protocol.md on stdin/stdout: one
request per line in, one response per request and the calls' events out.
When stdin closes, every call is stopped and the server exits.

Options:
  --max-buffer SIZE  the most a client may ask as a call's maxBuffer or
                     jobBuffer (default 64MiB; env PROCTREE_SERVE_MAX_BUFFER)
  --max-queued SIZE  stop reading requests while more than this waits on
                     stdout for the client (default 1MiB, at least 64k;
                     env PROCTREE_SERVE_MAX_QUEUED)
  -h, --help         show this help
`;

/**
 * The smallest --max-queued: above a stream's high-water mark (16 KiB), so
 * that being over it means a write returned false and 'drain' will come.
 */
const MIN_QUEUED = 64 * 1024;

/** The operator's limits: a flag, else its environment variable, else the default. */
export function serverLimits(flags: Record<string, unknown>, env: NodeJS.ProcessEnv): ServerLimits {
  const size = (flag: string, name: string, fallback: number): number => {
    const given = flags[flag.slice(2)] ?? env[name];
    if (given === undefined || given === '') return fallback;
    return parseSize(String(given), flags[flag.slice(2)] !== undefined ? flag : name);
  };
  const maxBuffer = size('--max-buffer', 'PROCTREE_SERVE_MAX_BUFFER', DEFAULT_LIMITS.maxBuffer);
  const maxQueued = size('--max-queued', 'PROCTREE_SERVE_MAX_QUEUED', DEFAULT_LIMITS.maxQueued);
  if (maxQueued < MIN_QUEUED) throw new UsageError(`--max-queued: at least ${MIN_QUEUED} bytes (64k)`);
  return { maxBuffer, maxQueued };
}

export async function serveCommand(argv: string[]): Promise<number> {
  const { flags } = parseFlags(argv, {
    help: { type: 'boolean', short: 'h' },
    'max-buffer': { type: 'string' },
    'max-queued': { type: 'string' },
  });
  if (flags.help) {
    process.stdout.write(serveHelp);
    return 0;
  }
  const limits = serverLimits(flags, process.env);
  return new Promise<number>((resolve) => {
    const server = new ProtocolServer({ input: process.stdin, output: process.stdout }, (status) => {
      for (const s of stopSignals) process.off(s, onSignal);
      // Flush what is queued on stdout, then let main exit with the status.
      if (process.stdout.writableLength === 0) resolve(status);
      else process.stdout.once('drain', () => resolve(status));
    }, limits);
    const onSignal = (): void => void server.stop();
    const stopSignals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
    for (const s of stopSignals) process.on(s, onSignal);
    server.start();
  });
}
