export { spawn, run } from './spawn';
export { ToolCall, type ToolCallEvents } from './toolcall';
export { PtyStream } from './pty';
export { Supervisor, getDefaultSupervisor, jobs, job, type SupervisorOptions, type SupervisorEvents } from './supervisor';
export { Job, type JobInfo, type JobOutput, type JobState } from './jobs';
export type { LinesOptions } from './output';
export type { Listener, ListenerProtocol, ReadyOptions, ReadyState } from './ports';
export { capabilities, type Capabilities } from './capabilities';
export type { Limits, LimitsCapability } from './limits';
export { AbortError, LeftoversError, ConfinementUnavailableError, type SpawnError } from './errors';
export type {
  CleanupReason,
  CleanupReport,
  Confinement,
  JobOptions,
  OutputOptions,
  ProcessInfo,
  PtyOptions,
  ResourceUsage,
  RunOptions,
  RunResult,
  SpawnOptions,
  StdioKind,
  StdioOption,
} from './types';
