// `proctree run --pty`: the command on a terminal of its own, joined to this
// process's stdio the way script(1) does it. On a user's terminal: raw mode
// (every key, ^C included, goes to the command's terminal, whose line
// discipline turns it into SIGINT for its foreground group), the window size
// forwarded and followed on SIGWINCH, the mode restored on the way out.
// Otherwise bytes are piped through, and the end of stdin is typed as ^D.
import { spawnSync } from 'node:child_process';
import tty from 'node:tty';

import { DEFAULT_COLS, DEFAULT_ROWS, DEFAULT_TERM } from '../options/stdio';
import { type PtyStream, typeEndOfInput } from '../pty';
import type { ToolCall } from '../toolcall';
import type { PtyOptions } from '../types';

/** The terminal this process writes to, whose size the command's window follows. */
function sizeSource(): tty.WriteStream | null {
  for (const s of [process.stdout, process.stderr]) if (s.isTTY) return s as tty.WriteStream;
  return null;
}

/** What the command's terminal starts as: the user's size and TERM when there is a user's terminal. */
export function terminalOptions(): PtyOptions {
  const source = sizeSource();
  const interactive = process.stdin.isTTY === true;
  return {
    cols: source?.columns || DEFAULT_COLS,
    rows: source?.rows || DEFAULT_ROWS,
    term: (interactive && process.env.TERM) || DEFAULT_TERM,
  };
}

/**
 * Joins the call's terminal to this process's stdin and (unless `collectOnly`)
 * stdout. Returns what undoes it: the user's terminal mode first.
 */
export function attachTerminal(call: ToolCall, collectOnly: boolean): () => void {
  const pty = call.pty as PtyStream;
  const stdin = process.stdin;
  const interactive = stdin.isTTY === true;
  if (interactive) {
    (stdin as tty.ReadStream).setRawMode(true);
    // libuv's raw mode keeps output processing (ONLCR): a full-screen program
    // that moves down with \n on its own raw terminal would have every line
    // start at column 0 here. Off, as cfmakeraw() does; setRawMode(false)
    // puts back the whole mode libuv saved first.
    spawnSync('stty', ['-opost'], { stdio: ['inherit', 'ignore', 'ignore'] });
  }

  let last: number | undefined;
  const onInput = (chunk: Buffer): void => {
    if (chunk.length > 0) last = chunk[chunk.length - 1];
    if (pty.writable) pty.write(chunk);
  };
  // Not a terminal: the end of the input is typed, as script(1) does.
  const onEnd = (): void => {
    if (pty.writable) typeEndOfInput(pty, last);
  };
  stdin.on('data', onInput);
  if (!interactive) stdin.once('end', onEnd);
  stdin.resume();

  if (!collectOnly) pty.pipe(process.stdout, { end: false });

  const source = sizeSource();
  const onResize = (): void => {
    if (source?.columns && source.rows) call.pty?.resize(source.columns, source.rows);
  };
  // Node follows SIGWINCH for a terminal stdout/stderr and says 'resize'.
  source?.on('resize', onResize);

  return () => {
    source?.off('resize', onResize);
    stdin.off('data', onInput);
    stdin.off('end', onEnd);
    stdin.pause();
    if (interactive) (stdin as tty.ReadStream).setRawMode(false);
    if (!collectOnly) pty.unpipe(process.stdout);
  };
}
