// The module-level spawn() and run(): calls of the default supervisor
// (getDefaultSupervisor() in supervisor.ts), for a harness that needs one.
import { getDefaultSupervisor } from './supervisor';
import type { ToolCall } from './toolcall';
import type { RunOptions, RunResult, SpawnOptions } from './types';

/**
 * Starts `file` in its own cgroup and returns its ToolCall. Invalid options
 * throw synchronously; a command that cannot start emits 'error'.
 */
export function spawn(file: string, args?: readonly string[], options?: SpawnOptions): ToolCall;
export function spawn(file: string, options?: SpawnOptions): ToolCall;
export function spawn(file: string, args?: readonly string[] | SpawnOptions, options?: SpawnOptions): ToolCall {
  return getDefaultSupervisor().spawn(file, args as readonly string[], options);
}

/**
 * Runs `file` to the end of its whole tree and resolves with the result for
 * any exit status; rejects only when the options are invalid or it could not
 * start. Without `input`, stdin is closed.
 */
export function run(file: string, args?: readonly string[], options?: RunOptions & { encoding?: BufferEncoding }): Promise<RunResult<string>>;
export function run(file: string, args: readonly string[], options: RunOptions & { encoding: 'buffer' }): Promise<RunResult<Buffer>>;
export function run(file: string, options?: RunOptions & { encoding?: BufferEncoding }): Promise<RunResult<string>>;
export function run(file: string, options: RunOptions & { encoding: 'buffer' }): Promise<RunResult<Buffer>>;
export function run(file: string, args?: readonly string[] | RunOptions, options?: RunOptions): Promise<RunResult<string | Buffer>> {
  // run(file, options) is run(file, [], options): the supervisor sorts it out.
  return getDefaultSupervisor().run(file, args as readonly string[], options as RunOptions & { encoding?: BufferEncoding });
}
