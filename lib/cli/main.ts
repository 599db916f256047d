// The `proctree` command: dispatches to run, doctor, ps and serve. Each is a
// thin face over the public API; a usage error is one line on stderr and
// exit status 2 everywhere.
import { EXIT_USAGE, packageVersion, UsageError } from './args';

export const mainHelp = `Usage: proctree <command> [options]

Commands:
  run [options] -- COMMAND [ARG...]   run COMMAND and stop its whole tree
                                      when it ends, times out or is interrupted
  doctor [--json]                     what this host allows, and what to fix
  ps [--json]                         live calls of proctree harnesses here
  serve                               JSON-lines server for other languages

Run 'proctree <command> --help' for a command's options.
`;

interface Command {
  exec: (argv: string[]) => Promise<number>;
  help: string;
}

// Loaded on demand: only `serve` needs ajv, and a quick
// command should not pay for what another one uses.
const commands: Record<string, () => Promise<Command>> = {
  run: () => import('./run').then((m) => ({ exec: m.runCommand, help: m.runHelp })),
  doctor: () => import('./doctor').then((m) => ({ exec: m.doctorCommand, help: m.doctorHelp })),
  ps: () => import('./ps').then((m) => ({ exec: m.psCommand, help: m.psHelp })),
  serve: () => import('./serve').then((m) => ({ exec: m.serveCommand, help: m.serveHelp })),
};

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  try {
    if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
      const topic = name === 'help' && rest[0] && Object.hasOwn(commands, rest[0]) ? await commands[rest[0]]() : undefined;
      process.stdout.write(topic ? topic.help : mainHelp);
      return name === undefined ? EXIT_USAGE : 0;
    }
    if (name === '--version' || name === '-V') {
      process.stdout.write(`${packageVersion()}\n`);
      return 0;
    }
    if (!Object.hasOwn(commands, name)) throw new UsageError(`unknown command '${name}' (try 'proctree --help')`);
    const command = await commands[name]();
    return await command.exec(rest);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`proctree: ${err.message}\n`);
      return EXIT_USAGE;
    }
    throw err;
  }
}

function exitWhenFlushed(status: number): void {
  // process.exit() drops what a piped stdout still holds: wait for it.
  process.stdout.write('', () => process.exit(status));
}

/** Runs the command line of this process and exits with its status. */
export function cli(): void {
  main(process.argv.slice(2)).then(exitWhenFlushed, (err: unknown) => {
    process.stderr.write(`proctree: ${(err as Error)?.stack ?? String(err)}\n`);
    exitWhenFlushed(1);
  });
}
