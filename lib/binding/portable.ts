// The portable binding: the addon's interface (NativeBinding) in TypeScript
// on node:child_process, for hosts where the addon does not exist (macOS,
// Windows, the BSDs) and for Linux with PROCTREE_PORTABLE set (how it is
// tested). No cgroup, no pidfd, no freeze, no guardian:
//
// - tier 'pgroup' (POSIX): the command leads a new session and process group
//   (child_process `detached`, which is setsid()); the call's tree is that
//   group plus every descendant of a member, as the process table shows
//   them. Signals go to the group (kill(-pgid)) and, one by one, to the
//   descendants that left it.
// - tier 'none' (Windows, and POSIX on request): the main process and its
//   descendants as the process table shows them, each signalled by pid.
//
// What neither can see: a process that left the group (setsid, setpgid)
// and whose parent then exited — the classic daemon. It is reparented away
// and is a miss: neither signalled nor reported. Emptiness is "nothing
// visible any more", hence `verified: 'none'` in every report.
import childProcess, { type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { constants as osConstants } from 'node:os';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';

import {
  type NativeBinding,
  type NativeErrorShape,
  type NativeEventCallback,
  NativeEventKind,
  type NativeProbe,
  type NativeProbes,
  type NativeSpawnSpec,
  type NativeSpawned,
  type PortableMode,
} from './contract';
import type { ProcessInfo } from '../types';
import {
  envObject,
  fromNodeError,
  groupExists,
  KILL_WAIT_MS,
  LADDER_POLL_MS,
  RESCAN_MS,
  SCAN_SOON_MS,
  SIGCONT,
  SIGKILL,
  signal,
  sysError,
  WATCH_POLL_MS,
  type PortableCall,
} from './portable-call';
import { aliveInGroup, describe, type ProcessRow, readTable, stillAlive } from './process-table';

// Node's own spawn, taken once at load: a harness that then installs
// proctree's spawn as child_process.spawn (a drop-in) must not make the
// portable binding call itself.
const cpSpawn = childProcess.spawn;

export function createPortableBinding(mode: PortableMode): NativeBinding {
  return new PortableBinding(mode);
}

class PortableBinding implements NativeBinding {
  readonly #mode: PortableMode;
  readonly #windows: boolean;
  readonly #calls = new Map<number, PortableCall>();
  #lastId = 0;
  #prefix: string | null = null;

  constructor(mode: PortableMode) {
    this.#mode = mode;
    this.#windows = mode.processTable === 'windows';
  }

  probe(): NativeProbes {
    const na: NativeProbe = { ok: false, errno: 'ENOSYS', detail: this.#mode.reason };
    return {
      location: null,
      probes: {
        cgroup2: na,
        delegation: na,
        clone3: na,
        cloneIntoCgroup: na,
        pidfd: na,
        pidfdSendSignal: na,
        waitidPidfd: na,
        freeze: na,
        cgroupKill: na,
        pidns: na,
        userns: na,
        subreaper: na,
        helper: na,
        userManager: na,
        pgroup: this.#windows
          ? { ok: false, errno: 'ENOSYS', detail: 'Windows has no process groups' }
          : {
              ok: true,
              detail: `portable: a new session and process group (child_process), signals to the group and to the descendants the process table (${this.#mode.processTable}) shows; a setsid escapee whose parent exited is invisible`,
            },
        none: {
          ok: true,
          detail: `portable: the main process and its descendants as the process table (${this.#mode.processTable}) shows them, signalled by pid; no group`,
        },
      },
    };
  }

  spawn(spec: NativeSpawnSpec, onEvent: NativeEventCallback): NativeSpawned | { error: NativeErrorShape } {
    const tier = spec.tier;
    if (tier !== 'none' && (tier !== 'pgroup' || this.#windows)) {
      return { error: sysError('ENOSYS', 'spawn', undefined, `the portable binding cannot run the ${tier} tier`) };
    }
    const stdio: Array<'pipe' | 'ignore' | 'inherit' | number> = [];
    for (const entry of spec.stdio) {
      // options reject pty before anything is made (pty.ts); this is the backstop.
      if (entry === 'pty') return { error: sysError('ENOSYS', 'openpty', undefined, 'no terminals in the portable tier') };
      stdio.push(typeof entry === 'object' ? 'pipe' : entry === 'close' ? 'ignore' : entry);
    }
    // As the addon's child reports them: a missing directory is chdir's ENOENT.
    if (spec.cwd !== undefined) {
      let dir: fs.Stats | undefined;
      try {
        dir = fs.statSync(spec.cwd);
      } catch (err) {
        return { error: sysError((err as { code?: string }).code ?? 'ENOENT', 'chdir', spec.cwd) };
      }
      if (!dir.isDirectory()) return { error: sysError('ENOTDIR', 'chdir', spec.cwd) };
    }
    const command = this.#command(spec);
    if ('error' in command) return command;

    let child: ChildProcess;
    try {
      child = cpSpawn(command.file, spec.argv.slice(1), {
        argv0: spec.argv[0],
        cwd: spec.cwd,
        env: envObject(spec.env),
        stdio,
        detached: tier === 'pgroup',
        windowsHide: true,
        windowsVerbatimArguments: spec.windowsVerbatimArguments === true,
        ...(spec.uid !== undefined ? { uid: spec.uid } : {}),
        ...(spec.gid !== undefined ? { gid: spec.gid } : {}),
      });
    } catch (err) {
      return { error: fromNodeError(err, spec, command.file) };
    }

    const call: PortableCall = {
      id: ++this.#lastId,
      tier,
      child,
      onEvent,
      pid: child.pid ?? 0,
      pgid: tier === 'pgroup' ? (child.pid ?? 0) : 0,
      exited: false,
      exitedAt: 0,
      empty: false,
      ladder: false,
      watching: false,
      ref: true,
      peak: 1,
      lastScan: 0,
      exitedPerf: 0,
      known: [],
      drained: false,
      fresh: null,
      timers: new Set(),
      handles: [],
    };
    this.#connect(call, spec);
    child.on('exit', (code, sig) => this.#onExit(call, code, sig));
    child.on('error', (err) => {
      // After a start, child_process reports failed kill()s here: we never call it.
      if (call.pid !== 0 || call.empty) return;
      call.empty = true;
      onEvent(NativeEventKind.StartFailed, fromNodeError(err, spec, command.file));
    });
    const base = { id: call.id, cgroup: '', method: 'child_process' as const, verified: 'none' as const };
    // child_process reports exec failures (ENOENT, EACCES) by 'error' a tick later.
    if (call.pid === 0) return { ...base, pending: true };
    this.#calls.set(call.id, call);
    return { ...base, pid: call.pid };
  }

  // The executable, found as execvp would (the addon's child tries the same
  // candidates): the first that is an executable file; EACCES when only
  // non-executable ones exist, else ENOENT. Windows: child_process searches.
  #command(spec: NativeSpawnSpec): { file: string } | { error: NativeErrorShape } {
    if (this.#windows) return { file: spec.candidates[0] };
    const base = path.resolve(spec.cwd ?? '.');
    let denied: string | null = null;
    for (const candidate of spec.candidates) {
      const file = path.resolve(base, candidate);
      try {
        if (fs.statSync(file).isFile()) {
          fs.accessSync(file, fs.constants.X_OK);
          return { file };
        }
        denied ??= file;
      } catch (err) {
        if ((err as { code?: string }).code === 'EACCES') denied ??= file;
      }
    }
    return { error: denied ? sysError('EACCES', 'execve', denied) : sysError('ENOENT', 'execve', spec.candidates[0]) };
  }

  // Each 'pipe' entry: the child's end (made by child_process) to our stream.
  #connect(call: PortableCall, spec: NativeSpawnSpec): void {
    spec.stdio.forEach((entry, i) => {
      if (typeof entry !== 'object') return;
      entry.connected = true;
      const theirs = call.child.stdio[i] as (Readable & Writable & { ref?: () => void; unref?: () => void }) | null | undefined;
      if (!theirs) {
        if (entry.readable) entry.stream.end();
        return;
      }
      call.handles.push(theirs);
      // EPIPE and ECONNRESET are not fatal, as with ChildProcess.
      theirs.on('error', () => {});
      if (entry.readable) {
        theirs.pipe(entry.stream);
        // pipe() ends ours on 'end' only; after an error too, or 'close' never comes.
        theirs.once('close', () => {
          if (!entry.stream.writableEnded && !entry.stream.destroyed) entry.stream.end();
        });
      } else {
        entry.stream.pipe(theirs);
      }
      // Ours destroyed (released, or stdin at the exit): so is the child's
      // end. Ours ended whole (stdin.end()): pipe() ended theirs, which
      // still has to flush what it holds.
      entry.stream.once('close', () => {
        if (entry.readable || !entry.stream.readableEnded) theirs.destroy();
      });
    });
  }

  #onExit(call: PortableCall, code: number | null, sig: NodeJS.Signals | null): void {
    if (call.exited || call.empty) return;
    call.exited = true;
    call.exitedAt = Date.now();
    call.exitedPerf = performance.now();
    call.onEvent(NativeEventKind.Exit, code, sig ? (osConstants.signals[sig] ?? 0) : 0);
    // The Exit listener may have started a ladder (leftovers): it reports Empty then.
    if (!call.ladder) this.#watch(call);
  }

  /** The call's tree in `rows`: the group and its members' descendants (pgroup), or the main and its descendants. */
  #visible(call: PortableCall, rows: readonly ProcessRow[]): ProcessRow[] {
    const children = new Map<number, ProcessRow[]>();
    for (const r of rows) {
      const list = children.get(r.ppid);
      if (list) list.push(r);
      else children.set(r.ppid, [r]);
    }
    const seen = new Map<number, ProcessRow>();
    const add = (r: ProcessRow): void => {
      if (!seen.has(r.pid)) seen.set(r.pid, r);
    };
    if (call.pgid) {
      for (const r of rows) if (r.pgid === call.pgid) add(r);
    } else if (!call.exited) {
      const main = rows.find((r) => r.pid === call.pid);
      if (main) add(main);
    } else if (this.#windows) {
      // Windows does not reparent: children of the exited main still name it,
      // if they started before it exited (else a newer process holds its number).
      for (const r of children.get(call.pid) ?? []) if (r.pid !== call.pid && r.start <= call.exitedAt) add(r);
    }
    // Descendants, breadth first (the map grows as the walk goes).
    for (const parent of seen.values()) {
      for (const c of children.get(parent.pid) ?? []) {
        // A child older than its parent belongs to an earlier holder of the parent's number.
        if (c.start && parent.start && c.start < parent.start) continue;
        add(c);
      }
    }
    const out = [...seen.values()];
    call.peak = Math.max(call.peak, out.length);
    return out;
  }

  /** Whether nothing of the call can be visible, known without reading the process table. */
  #surelyEmpty(call: PortableCall): boolean {
    if (!call.exited) return false;
    // No member left: no seed for the walk.
    if (call.pgid) return !groupExists(call.pgid);
    // POSIX reparents the exited main's children away from it: nothing names it.
    return !this.#windows;
  }

  /** The call's tree now. */
  #visibleNow(call: PortableCall): ProcessRow[] {
    if (call.empty || this.#surelyEmpty(call)) return [];
    const exited = call.exited;
    call.lastScan = performance.now();
    const rows = this.#visible(call, readTable(this.#mode.processTable));
    // A member outside the group can drop out of sight alive (its parent
    // exits): only group members are evidence that the call goes on.
    call.known = call.pgid ? rows.filter((r) => r.pgid === call.pgid) : rows;
    if (exited && rows.length === 0) call.drained = true;
    if (call.fresh === null) {
      queueMicrotask(() => {
        call.fresh = null;
      });
    }
    call.fresh = rows;
    return rows;
  }

  /**
   * Whether a member the last read found is still there: 'exact' from /proc
   * (alive, same group, same start), 'approx' from kill(pid, 0) (a zombie or
   * a reused pid would pass), 'none' when every one is gone.
   */
  #knownAlive(call: PortableCall): 'exact' | 'approx' | 'none' {
    let approx = false;
    for (const r of call.known) {
      const exact = call.pgid ? aliveInGroup(this.#mode.processTable, r.pid, call.pgid, r.start) : null;
      if (exact === true) return 'exact';
      if (exact === null && signal(r.pid, 0)) approx = true;
    }
    return approx ? 'approx' : 'none';
  }

  /** Whether the call is empty: the main process exited and nothing of the tree is visible. */
  #isEmpty(call: PortableCall): boolean {
    if (!call.exited) return false;
    if (call.drained || this.#surelyEmpty(call)) return true;
    // The group still exists: live members, or zombies that init has not
    // reaped yet (kill(-pgid, 0) counts them). The table decides, read after
    // the exit once, then again only when the members it found are gone.
    if (call.lastScan >= call.exitedPerf) {
      const since = performance.now() - call.lastScan;
      const there = this.#knownAlive(call);
      if (there === 'exact') return false;
      if (there === 'approx' && since < RESCAN_MS) return false;
      if (there === 'none' && since < SCAN_SOON_MS[this.#mode.processTable]) return false;
    }
    return this.#visibleNow(call).length === 0;
  }

  /** `sig` to the group (pgroup) and to every visible process outside it. */
  #send(call: PortableCall, rows: readonly ProcessRow[], sig: number): void {
    if (call.pgid) signal(-call.pgid, sig);
    for (const r of rows) if (!call.pgid || r.pgid !== call.pgid) signal(r.pid, sig);
  }

  /** Members that left the main process's group: what kill(-pgid) alone would have missed. */
  #escaped(call: PortableCall, rows: readonly ProcessRow[]): number {
    const home = call.pgid || rows.find((r) => r.pid === call.pid)?.pgid || 0;
    return home ? rows.filter((r) => r.pgid !== home).length : 0;
  }

  #later(call: PortableCall, ms: number, fn: () => void): void {
    const t = setTimeout(() => {
      call.timers.delete(t);
      fn();
    }, ms);
    if (!call.ref) t.unref();
    call.timers.add(t);
  }

  #sleep(call: PortableCall, ms: number): Promise<void> {
    return new Promise((resolve) => this.#later(call, ms, resolve));
  }

  /** After the main exit: Empty once nothing is visible, polled (cheaply: kill(-pgid, 0)) at a growing interval. */
  #watch(call: PortableCall): void {
    if (call.empty || call.ladder || call.watching) return;
    call.watching = true;
    const tick = (delay: number): void =>
      this.#later(call, delay, () => {
        if (call.empty || call.ladder) {
          call.watching = false;
          return;
        }
        if (this.#isEmpty(call)) {
          call.watching = false;
          this.#emitEmpty(call);
          return;
        }
        tick(Math.min(Math.max(delay * 2, 5), WATCH_POLL_MS));
      });
    tick(0);
  }

  #emitEmpty(call: PortableCall): void {
    if (call.empty) return;
    call.empty = true;
    for (const t of call.timers) clearTimeout(t);
    call.timers.clear();
    this.#calls.delete(call.id);
    // No rusage of a tree through child_process: source 'none'.
    call.onEvent(NativeEventKind.Empty, { peakProcesses: call.peak });
  }

  /**
   * What the ladder signalled that is still alive but no longer visible:
   * an escapee whose parent died during the ladder (reparented away), or, in
   * 'none', a child of the main process once it exited. It still gets its
   * grace and its SIGKILL.
   */
  #stragglers(call: PortableCall, signalled: readonly ProcessRow[], visible: readonly ProcessRow[]): ProcessRow[] {
    const seen = new Set(visible.map((r) => r.pid));
    return stillAlive(this.#mode.processTable, signalled.filter((r) => !seen.has(r.pid) && r.pid !== call.pid));
  }

  /**
   * Polls until the call is empty and nothing it signalled is left (true),
   * or `deadline` passes (false); in the kill phase, SIGKILL to the group
   * each turn.
   */
  async #settle(call: PortableCall, signalled: readonly ProcessRow[], deadline: number, killing: boolean): Promise<boolean> {
    let delay = 2;
    for (;;) {
      if (this.#isEmpty(call) && this.#stragglers(call, signalled, []).length === 0) return true;
      const left = deadline - performance.now();
      if (left <= 0) return false;
      // A member forked since the last pass is in the group: it gets its SIGKILL here.
      if (killing && call.pgid) signal(-call.pgid, SIGKILL);
      await this.#sleep(call, Math.min(delay, left));
      delay = Math.min(delay * 2, LADDER_POLL_MS);
    }
  }

  terminate(id: number, graceMs: number, sig: number, reason: string): boolean {
    const call = this.#calls.get(id);
    if (!call || call.empty) return false;
    if (call.ladder) return true;
    // At the exit, the ladder for the leftovers starts from the read that found them.
    const rows = call.exited && call.fresh !== null ? call.fresh : this.#visibleNow(call);
    if (rows.length === 0) return false;
    call.ladder = true;
    void this.#ladder(call, rows, graceMs, sig, reason);
    return true;
  }

  // The ladder: `sig` (+ SIGCONT) once to every visible process, `grace`,
  // SIGKILL to what is still visible, a bounded wait, then the report. Not
  // race-free: nothing is frozen, so a process forked outside the group
  // between the read and the signal is not in this pass.
  async #ladder(call: PortableCall, rows: ProcessRow[], graceMs: number, sig: number, reason: string): Promise<void> {
    const t0 = performance.now();
    const signaled = rows.length;
    const escaped = this.#escaped(call, rows);
    this.#send(call, rows, sig);
    // A stopped member acts on the signal only once continued.
    if (SIGCONT !== undefined && sig !== SIGKILL && sig !== SIGCONT) this.#send(call, rows, SIGCONT);
    let empty = await this.#settle(call, rows, t0 + graceMs, false);
    let killed = 0;
    if (!empty) {
      const visible = this.#visibleNow(call);
      const stragglers = this.#stragglers(call, rows, visible);
      killed = visible.length + stragglers.length;
      this.#send(call, visible, SIGKILL);
      // By pid: the group they were in when signalled may not be theirs any more.
      for (const r of stragglers) signal(r.pid, SIGKILL);
      empty = await this.#settle(call, rows, performance.now() + KILL_WAIT_MS, true);
    }
    let leftovers: ProcessInfo[] = [];
    if (!empty) {
      const visible = this.#visibleNow(call);
      leftovers = describe(this.#mode.processTable, [...visible, ...this.#stragglers(call, rows, visible)].map((r) => r.pid));
    }
    call.ladder = false;
    call.onEvent(NativeEventKind.Cleanup, {
      reason,
      signaled,
      killed,
      escaped,
      verified: 'none',
      leftovers,
      durationMs: performance.now() - t0,
    });
    if (empty || (call.exited && leftovers.length === 0)) this.#emitEmpty(call);
    else this.#watch(call);
  }

  terminateGroup(ids: readonly number[], signals: readonly number[], graceMs: number, reason: string): boolean[] {
    return ids.map((id, i) => this.terminate(id, graceMs, signals[i], reason));
  }

  kill(id: number, sig: number): number {
    const call = this.#calls.get(id);
    if (!call || call.empty) return 0;
    const rows = this.#visibleNow(call);
    if (rows.length > 0 && sig !== 0) this.#send(call, rows, sig);
    return rows.length;
  }

  members(id: number): number[] {
    const call = this.#calls.get(id);
    return call ? this.#visibleNow(call).map((r) => r.pid) : [];
  }

  processInfo(pids: readonly number[], pgid?: number): ProcessInfo[] {
    const infos = describe(this.#mode.processTable, pids);
    if (pgid === undefined) return infos;
    const first = infos.find((p) => p.pgid === pgid);
    return first ? [first] : [];
  }

  /**
   * At the harness's exit ('exit' listeners run): SIGKILL to every live
   * call's group and visible processes, synchronously. There is no guardian:
   * a harness killed by a signal it does not handle leaves its trees running.
   */
  shutdown(): void {
    const live = [...this.#calls.values()].filter((c) => !c.empty);
    if (live.length === 0) return;
    let rows: ProcessRow[] = [];
    try {
      rows = readTable(this.#mode.processTable);
    } catch {
      // no table: the groups still get their SIGKILL
    }
    for (const call of live) this.#send(call, this.#visible(call, rows), SIGKILL);
  }

  settle(): true {
    return true;
  }

  retire(): [number, number] {
    return [0, 0];
  }

  setRef(id: number, ref: boolean): void {
    const call = this.#calls.get(id);
    if (!call) return;
    call.ref = ref;
    if (ref) call.child.ref();
    else call.child.unref();
    for (const h of call.handles) (ref ? h.ref : h.unref)?.call(h);
    for (const t of call.timers) (ref ? t.ref() : t.unref());
  }

  pipe(): [number, number] {
    throw sysError('ENOSYS', 'pipe2', undefined, 'the portable binding makes no pipes of its own');
  }

  streamOpen(): [number, number, number] {
    throw sysError('ENOSYS', 'pipe2', undefined, 'the portable binding makes no pipes of its own');
  }

  streamAdopt(): number {
    throw sysError('ENOSYS', 'fcntl', undefined, 'no terminals in the portable tier');
  }

  streamRead(): void {}

  streamWrite(): boolean {
    return false;
  }

  streamShutdown(): undefined {
    return undefined;
  }

  streamEnd(): void {}

  streamClose(): void {}

  streamRef(): void {}

  closeFd(fd: number): void {
    fs.closeSync(fd);
  }

  ptyResize(): void {
    throw sysError('ENOSYS', 'ioctl', undefined, 'no terminals in the portable tier');
  }

  ptyForeground(): number {
    return -1;
  }

  cgroup2Hierarchies(): Array<{ mount: string; root: string }> {
    return [];
  }

  cgroupMembers(): number[] {
    return [];
  }

  subtreePrefix(): string {
    this.#prefix ??= `proctree-${process.pid}-${randomBytes(6).toString('hex')}`;
    return this.#prefix;
  }
}
