// Bounded calls: timeout, AbortSignal, idleTimeout and terminate() stop the
// whole tree, escapees included.
import { load, scenario, token, waitForLive, liveWith, leafReleased } from './_lib.mjs';

scenario('timeout', async (t) => {
  const { run, spawn } = load();

  let T = token();
  // 3 s: bash must have forked and the child run setsid() before the
  // timeout, or nothing has escaped yet (escaped 0) on a loaded machine.
  const timed = await run('bash', ['-c', `setsid sleep ${T} & sleep ${T}`], { timeout: 3000, grace: 300 });
  t.check(timed.timedOut && timed.cleanup.reason === 'timeout' && timed.cleanup.escaped === 1, 'timeout', timed.cleanup);
  t.check(timed.signal === 'SIGTERM', 'timeout: SIGTERM', timed.signal);
  t.check(liveWith(T).length === 0 && leafReleased(timed.cgroup), 'timeout: tree gone', liveWith(T));

  T = token();
  const ac = new AbortController();
  const aborted = run('bash', ['-c', `setsid sleep ${T} & sleep ${T}`], { signal: ac.signal });
  await waitForLive(T, 2, 'sleep');
  ac.abort();
  const a = await aborted;
  t.check(a.aborted && a.cleanup.reason === 'abort', 'AbortSignal', a.cleanup);
  t.check(liveWith(T).length === 0, 'abort: tree gone', liveWith(T));

  // spawn() with a signal: 'error' with an AbortError, as Node's.
  T = token();
  const ac2 = new AbortController();
  const call = spawn('bash', ['-c', `setsid sleep ${T} & sleep ${T}`], { signal: ac2.signal, stdio: 'ignore' });
  const errored = new Promise((resolve) => call.on('error', resolve));
  await waitForLive(T, 2, 'sleep');
  ac2.abort('enough');
  const err = await errored;
  await call.done.catch(() => {});
  t.check(err.name === 'AbortError' && err.cause === 'enough', 'spawn: AbortError', { name: err.name, cause: err.cause });
  t.check(liveWith(T).length === 0 && call.aborted, 'spawn abort: tree gone', liveWith(T));

  T = token();
  // 2 s: the idle clock runs from the spawn, so bash must have printed
  // 'once' (and its child run setsid()) within it, even under load.
  const idle = await run('bash', ['-c', `echo once; setsid sleep ${T} & sleep ${T}`], { idleTimeout: 2000, grace: 300 });
  t.check(idle.cleanup.reason === 'idle' && idle.stdout === 'once\n', 'idleTimeout', [idle.cleanup.reason, idle.stdout]);
  t.check(liveWith(T).length === 0, 'idle: tree gone', liveWith(T));

  T = token();
  const stubborn = spawn('bash', ['-c', `trap '' TERM; setsid bash -c "trap '' TERM; exec sleep ${T}" & sleep ${T} & wait`], { stdio: 'ignore' });
  await waitForLive(T, 2, 'sleep');
  const report = await stubborn.terminate({ grace: 300 });
  await stubborn.done;
  t.check(report.killed >= 2 && report.leftovers.length === 0 && report.escaped >= 1, 'terminate: SIGKILL after grace', report);
  t.check(stubborn.signalCode === 'SIGKILL', 'main SIGKILLed', stubborn.signalCode);
  t.check(liveWith(T).length === 0, 'terminate: tree gone', liveWith(T));
});
