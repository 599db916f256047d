export { spawn, run } from './default-supervisor';
export { ToolCall } from './toolcall';
export { PtyStream } from './pty';
export { Supervisor, getDefaultSupervisor, jobs, job, type SupervisorOptions, type SupervisorEvents } from './supervisor';
export { Job, type JobInfo, type JobOutput, type JobState } from './jobs';
export type { LinesOptions } from './output';
export type { Listener, ListenerProtocol, ReadyOptions, ReadyState } from './types';
export { capabilities, type Capabilities } from './capabilities';
export type { LimitsCapability } from './limits';
export { AbortError, LeftoversError, ConfinementUnavailableError, type SpawnError } from './errors';
export type {
  CleanupReason,
  CleanupReport,
  Confinement,
  EventCallback,
  JobOptions,
  Limits,
  OutputOptions,
  ProcessInfo,
  PtyOptions,
  ResourceUsage,
  RunOptions,
  RunResult,
  SpawnOptions,
  StdioKind,
  StdioOption,
  ToolCallEvents,
} from './types';
