export { spawn, run } from './run';
export { ToolCall, type ToolCallEvents } from './toolcall';
export { PtyStream } from './pty';
export { Supervisor, getDefaultSupervisor, type SupervisorOptions, type SupervisorEvents } from './supervisor';
export { capabilities, type Capabilities } from './capabilities';
export { AbortError, LeftoversError, ConfinementUnavailableError, type SpawnError } from './errors';
export type {
  CleanupReason,
  CleanupReport,
  Confinement,
  ProcessInfo,
  PtyOptions,
  RunOptions,
  RunResult,
  SpawnOptions,
  StdioKind,
  StdioOption,
} from './types';
