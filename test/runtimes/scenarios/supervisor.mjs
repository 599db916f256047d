// A Supervisor: many calls in one subtree, maxConcurrent queueing, events,
// and shutdown() stopping every call at once (queued ones never start).
import fs from 'node:fs';
import path from 'node:path';

import { load, scenario, token, waitForLive, liveWith, cgroupMembers, waitFor } from './_lib.mjs';

scenario('supervisor', async (t) => {
  const { Supervisor } = load();
  const sup = new Supervisor({ name: 'runtimes', maxConcurrent: 3, grace: 500 });
  const cleanups = [];
  sup.on('cleanup', (r) => cleanups.push(r));
  const T = token();
  const calls = [];
  for (let i = 0; i < 5; i++) {
    const c = sup.spawn('bash', ['-c', `setsid sleep ${T} & sleep ${T}`], { stdio: 'ignore' });
    c.on('error', () => {});
    calls.push(c);
  }
  const pids = await waitForLive(T, 6, 'sleep');
  t.check(pids.length === 6, 'three calls run (6 sleepers), two queued', pids.length);
  t.check(calls.slice(3).every((c) => c.pid === undefined), 'queued calls have no pid yet');
  t.check(sup.calls.size === 5, 'sup.calls lists all five', sup.calls.size);
  const group = path.dirname(calls[0].cgroup);
  t.check(path.basename(group).startsWith(`proctree-${process.pid}-`) && path.basename(group).endsWith('-runtimes'), 'subtree name', group);
  const members = cgroupMembers(group);
  t.check(pids.every((p) => members.includes(p)), 'every sleeper in the subtree', { pids, members });

  await sup.shutdown({ grace: 500 });
  await Promise.all(calls.map((c) => new Promise((r) => (c.exitCode !== null || c.signalCode !== null || c.pid === undefined ? r() : c.once('close', r)))));
  t.check(await waitFor(() => liveWith(T).length === 0, 5000), 'shutdown: nothing left in /proc', liveWith(T));
  t.check(cgroupMembers(group).length === 0, 'shutdown: subtree empty', cgroupMembers(group));
  t.check(cleanups.filter((r) => r.reason === 'shutdown').length === 3, 'three shutdown reports', cleanups.map((r) => r.reason));
  t.check(cleanups.every((r) => r.leftovers.length === 0), 'no leftovers');
  t.check(calls.slice(3).every((c) => c.pid === undefined), 'queued calls never started');

  // A fresh supervisor in the same process, run() with queueing.
  const sup2 = new Supervisor({ name: 'runtimes2', maxConcurrent: 1 });
  const results = await Promise.all([1, 2, 3].map((i) => sup2.run('sh', ['-c', `echo ${i}`])));
  t.check(results.map((r) => r.stdout).join('') === '1\n2\n3\n', 'queued runs, in order', results.map((r) => r.stdout));
  t.check(results[2].queuedMs >= 0, 'queuedMs');
  await sup2.shutdown();
  await waitFor(() => !fs.existsSync(path.dirname(results[0].cgroup)) || cgroupMembers(path.dirname(results[0].cgroup)).length === 0, 3000);
  t.check(cgroupMembers(path.dirname(results[0].cgroup)).length === 0, 'second subtree empty');
});
