// Background jobs: what a command leaves running becomes a job (leftovers:
// 'keep'), is listed, its output goes to a ring buffer that can be read from
// an offset, and stop() ends its whole tree; background: true from the start.
import { load, scenario, token, waitFor, waitForLive, liveWith, cgroupMembers, leafReleased } from './_lib.mjs';

scenario('jobs', async (t) => {
  const { run, jobs, job } = load();
  const T = token();
  // The background part speaks only once the main shell is gone (bounded
  // wait), so its lines go to the job's ring, not to run()'s stdout.
  const bg = `(for n in $(seq 100); do kill -0 $$ 2>/dev/null || break; sleep 0.05; done; for i in 1 2 3; do echo line$i; done; setsid sleep ${T} & exec sleep ${T}) & echo started`;
  const r = await run('bash', ['-c', bg], { leftovers: 'keep' });
  t.check(r.exitCode === 0 && r.stdout.startsWith('started\n'), 'run() settles when the command exits', [r.exitCode, r.stdout]);
  t.check(typeof r.jobId === 'string' && r.remaining.length >= 1, 'jobId and remaining', [r.jobId, r.remaining.length]);
  const info = jobs().find((j) => j.id === r.jobId);
  t.check(info && info.state === 'running', 'jobs() lists it running', info);
  const j = job(r.jobId);
  await waitFor(() => j.read().text.includes('line3'));
  const first = j.read();
  // The ring has the call's whole output, what run() returned too.
  t.check(first.text === 'started\nline1\nline2\nline3\n', 'the ring has the output', first);
  t.check(j.read(first.next).text === '', 'read(next) gives only what came since');
  t.check(j.tail(6).text === 'line3\n', 'tail(6)', j.tail(6));
  const sleepers = await waitForLive(T, 2, 'sleep');
  const members = cgroupMembers(r.cgroup);
  t.check(sleepers.every((p) => members.includes(p)), "the job's processes are in its leaf", { sleepers, members });
  const report = await j.stop({ grace: 500 });
  t.check(report.leftovers.length === 0 && report.signaled >= 2, 'stop()', report);
  t.check((await j.wait()).state === 'stopped', 'state stopped');
  t.check(liveWith(T).length === 0 && leafReleased(r.cgroup), 'job tree gone', liveWith(T));

  const T2 = token();
  const b = await run('bash', ['-c', `echo bg-out; exec sleep ${T2}`], { background: true });
  t.check(b.jobId && b.exitCode === null, 'background: settles at spawn', b.jobId);
  const bj = job(b.jobId);
  await waitFor(() => bj.read().text.includes('bg-out'));
  t.check(bj.info().state === 'running' && bj.info().members === 1, 'background job running', bj.info());
  await bj.stop({ grace: 500 });
  t.check((await bj.wait()).state === 'stopped' && liveWith(T2).length === 0, 'background job stopped', liveWith(T2));
});
