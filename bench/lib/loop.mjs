// How long the event loop went without running a timer, measured two ways
// over the same stretch, and how much of the longest stall was the kernel
// running other processes on this machine's cores rather than the code under
// test.
import fs from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';

/**
 * The main thread's time spent runnable but waiting for a CPU (ns), from
 * /proc/thread-self/schedstat (on-CPU ns, runqueue-wait ns, timeslices). The
 * file is kept open and re-read with pread (one system call, about 1 µs).
 * Null where the kernel does not keep it (no CONFIG_SCHED_INFO).
 */
function runqueueClock() {
  let fd;
  try {
    fd = fs.openSync('/proc/thread-self/schedstat', 'r');
  } catch {
    return null;
  }
  const buf = Buffer.alloc(96);
  const read = () => {
    const n = fs.readSync(fd, buf, 0, buf.length, 0);
    const fields = buf.toString('latin1', 0, n).split(' ');
    return Number(fields[1]);
  };
  try {
    if (!Number.isFinite(read())) throw new Error('unexpected schedstat');
  } catch {
    fs.closeSync(fd);
    return null;
  }
  return { read, close: () => fs.closeSync(fd) };
}

/**
 * Starts watching the loop; the returned function stops and summarizes.
 *
 * - `p99Ms`, `maxDelayMs`, `delaySamples`: monitorEventLoopDelay({ resolution:
 *   1 }), which only records when its own timer gets to run, so a loop that
 *   never gets back to its timers shows no sample at all.
 * - `longestStallMs`: the longest gap between ticks of a 1 ms setInterval,
 *   the stretch's start and end included (so it also shows that loop).
 * - `longestOwnStallMs`: the same gaps less the time the kernel kept the
 *   loop's thread waiting for a CPU while other work ran (runqueue wait in
 *   schedstat): what the process itself blocked, in its code or in system
 *   calls (a vfork wait counts, it is not a runqueue wait). On a machine
 *   shared with other work the wall figure carries the scheduler's slices
 *   of everyone else; this one does not.
 */
export function watchLoop() {
  const hist = monitorEventLoopDelay({ resolution: 1 });
  hist.enable();
  const rq = runqueueClock();
  const ticks = [performance.now()];
  const waits = rq ? [rq.read()] : null;
  const tick = () => {
    ticks.push(performance.now());
    if (rq) waits.push(rq.read());
  };
  const timer = setInterval(tick, 1);
  return () => {
    clearInterval(timer);
    tick();
    hist.disable();
    rq?.close();
    let longest = 0;
    let longestAt = 0;
    let longestOwn = 0;
    for (let i = 1; i < ticks.length; i += 1) {
      const gap = ticks[i] - ticks[i - 1];
      if (gap > longest) {
        longest = gap;
        longestAt = i;
      }
      if (waits) longestOwn = Math.max(longestOwn, gap - (waits[i] - waits[i - 1]) / 1e6);
    }
    return {
      p99Ms: hist.count > 0 ? hist.percentile(99) / 1e6 : null,
      maxDelayMs: hist.count > 0 ? hist.max / 1e6 : null,
      delaySamples: hist.count,
      timerTicks: ticks.length - 2,
      longestStallMs: longest,
      // Of the longest wall gap, how much was runqueue wait.
      longestStallRunqueueMs: waits ? (waits[longestAt] - waits[longestAt - 1]) / 1e6 : null,
      longestOwnStallMs: waits ? longestOwn : null,
      wallMs: ticks[ticks.length - 1] - ticks[0],
    };
  };
}

/** Watches the loop while `fn` runs; resolves with fn's value and the watch. */
export async function watchDuring(fn) {
  const stop = watchLoop();
  try {
    const value = await fn();
    return { value, loop: stop() };
  } catch (err) {
    stop();
    throw err;
  }
}
