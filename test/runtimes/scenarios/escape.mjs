// The escape suite: trees that killpg misses, each proved inside the call's
// cgroup while it runs (cgroup.procs) and gone afterwards (/proc), not by
// the library's report.
import { load, scenario, token, waitForLive, liveWith, cgroupMembers, leafReleased, waitFor } from './_lib.mjs';

scenario('escape', async (t) => {
  const { spawn, run } = load();

  const cases = [
    // name, script (T = the case's token), sleepers it starts
    ['setsid double fork', (T) => `(setsid sleep ${T} &) ; sleep ${T}`, 2],
    ['nohup … & disown', (T) => `nohup sleep ${T} >/dev/null 2>&1 & disown; sleep ${T}`, 2],
    ['((sleep)&) subshell orphan', (T) => `((sleep ${T})&); ((setsid sleep ${T})&); sleep ${T}`, 3],
    ['setpgid into a group of its own', (T) => `python3 -c 'import os; os.setpgid(0, 0); os.execvp("sleep", ["sleep", "${T}"])' & sleep ${T}`, 2],
    ['a 10-deep chain of setsid daemons', (T) => `s='n=$1; if [ "$n" -gt 0 ]; then setsid bash -c "$0" "$0" $((n-1)) & fi; exec sleep ${T}'; bash -c "$s" "$s" 10`, 11],
    ["SIGTERM ignored (killed after grace)", (T) => `trap '' TERM; sleep ${T} & setsid sleep ${T} & wait`, 2],
  ];
  for (const [name, script, sleepers] of cases) {
    const T = token();
    const call = spawn('bash', ['-c', script(T)], { stdio: 'ignore' });
    call.on('error', () => {});
    const cg = call.cgroup;
    const pids = await waitForLive(T, sleepers, 'sleep');
    t.check(pids.length >= sleepers, `${name}: ${sleepers} sleepers started`, pids.length);
    const members = cgroupMembers(cg);
    t.check(pids.every((p) => members.includes(p)), `${name}: every sleeper in the call's cgroup`, { pids, members });
    const report = await call.terminate({ grace: 500 });
    await call.done;
    t.check(liveWith(T).length === 0, `${name}: nothing left in /proc`, liveWith(T));
    t.check(leafReleased(cg), `${name}: leaf empty or removed`);
    t.check(report.leftovers.length === 0 && report.verified === 'cgroup.events', `${name}: report`, report);
  }

  // The daemon outlives the main process: run() stops it as a leftover.
  const T = token();
  const r = await run('bash', ['-c', `setsid sleep ${T} & disown; (sleep ${T} &); sleep 0.2; echo done`], { grace: 500 });
  t.check(r.exitCode === 0 && r.stdout === 'done\n', 'run(): main exited 0', [r.exitCode, r.stdout]);
  t.check(r.cleanup && r.cleanup.reason === 'leftovers' && r.cleanup.leftovers.length === 0, 'run(): leftovers stopped', r.cleanup);
  t.check(await waitFor(() => liveWith(T).length === 0, 5000), 'run(): leftovers gone from /proc', liveWith(T));

  // More than 64 left behind: read from /proc on the addon's ports thread.
  const L = token();
  const left = spawn('bash', ['-c', `for i in $(seq 100); do sleep ${L} & done; exit 0`], { stdio: 'ignore', grace: 2000 });
  const named = await new Promise((resolve) => left.once('leftover', resolve));
  await left.done;
  t.check(named.length === 100 && named.every((p) => p.sid === left.pid), 'leftover: all 100 named', named.length);
  t.check(await waitFor(() => liveWith(L).length === 0, 5000), 'leftover: gone from /proc', liveWith(L));

  // A tree of more than 128: its first pass signals the main's group at once.
  const G = token();
  const big = spawn('bash', ['-c', `for i in $(seq 200); do sleep ${G} & done; wait`], { stdio: 'ignore' });
  await waitForLive(G, 200, 'sleep');
  const report = await big.terminate({ grace: 5000 });
  await big.done;
  t.check(report.signaled === 201 && report.killed === 0 && report.leftovers.length === 0, 'a tree of 201: each signalled once, none killed', report);
  t.check(liveWith(G).length === 0, 'a tree of 201: gone from /proc', liveWith(G));
});
