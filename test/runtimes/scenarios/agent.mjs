// What an agent's harness does beyond running a command, in every runtime: a
// server started in the background is ready once the kernel shows it
// listening, and its port is what it listens on; one that never listens is
// stopped at ready.timeout; a tree is paused (cgroup.freeze) and resumed; a
// sealed call sees only its own processes; a worker thread runs calls of
// its own.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { Worker } from 'node:worker_threads';

import { load, scenario, token, here, waitFor, liveWith, leafReleased, running } from './_lib.mjs';

/** A one-line HTTP server on an ephemeral port; `T` in its cmdline finds it in /proc. */
const server = (T) =>
  `exec python3 -u -c 'import http.server as h; h.ThreadingHTTPServer(("127.0.0.1", 0), h.SimpleHTTPRequestHandler).serve_forever()' ${T}`;

const frozen = (leaf) => /^frozen 1$/m.test(fs.readFileSync(`${leaf}/cgroup.events`, 'utf8'));

scenario('agent', async (t) => {
  const { run, spawn, job, capabilities } = load();

  // Ready once it listens: the port comes from the kernel, and it answers.
  let T = token();
  const r = await run('bash', ['-c', `(${server(T)}) & echo started`], { leftovers: 'keep', ready: { listening: true, timeout: 20000 } });
  t.check(r.exitCode === 0 && typeof r.jobId === 'string' && r.ready, 'ready: settles with the job', [r.exitCode, r.jobId, r.ready]);
  const [listener] = r.ready.listening;
  t.check(listener && listener.protocol === 'tcp' && listener.address === '127.0.0.1' && listener.port > 0, 'ready: the listener', r.ready.listening);
  const srv = job(r.jobId);
  const ports = await srv.ports();
  t.check(ports.some((l) => l.port === listener.port), 'ports() of the job', ports);
  const status = await new Promise((resolve, reject) =>
    http.get(`http://127.0.0.1:${listener.port}/`, (res) => resolve(res.resume().statusCode)).on('error', reject),
  );
  t.check(status === 200, 'the port answers', status);
  const stopped = await srv.stop({ grace: 2000 });
  t.check(stopped.leftovers.length === 0 && liveWith(T).length === 0 && leafReleased(r.cgroup), 'the server stopped, whole', [stopped, liveWith(T)]);

  // Never listens: stopped at ready.timeout, whole tree, with the output so far.
  T = token();
  const never = await run('bash', ['-c', `sleep ${T} & setsid sleep ${T} & echo waiting`], { leftovers: 'keep', ready: { listening: true, timeout: 1500 } });
  t.check(never.cleanup?.reason === 'not-ready' && never.ready === null && never.stdout === 'waiting\n', 'not ready in time: stopped', [never.cleanup, never.ready, never.stdout]);
  t.check(liveWith(T).length === 0 && leafReleased(never.cgroup), 'not ready: tree gone', liveWith(T));

  // pause() freezes the whole tree (the kernel says frozen), resume() thaws it.
  T = token();
  const ticker = spawn('bash', ['-c', `sleep ${T} & while :; do echo tick; sleep 0.02; done`], { stdio: ['ignore', 'pipe', 'ignore'] });
  let ticks = 0;
  ticker.stdout.on('data', () => ticks++);
  await waitFor(() => ticks > 0);
  await ticker.pause();
  t.check(ticker.paused && frozen(ticker.cgroup), 'pause(): frozen', fs.readFileSync(`${ticker.cgroup}/cgroup.events`, 'utf8'));
  // What was in the pipe is read; then nothing comes while frozen (a tick
  // every 20 ms otherwise): 400 ms without one.
  let last = -1;
  let since = 0;
  const still = await waitFor(() => {
    if (ticks !== last) [last, since] = [ticks, Date.now()];
    return Date.now() - since >= 400;
  });
  const held = ticks;
  t.check(still && frozen(ticker.cgroup), 'nothing runs while paused', ticks);
  await ticker.resume();
  t.check(!ticker.paused && !frozen(ticker.cgroup), 'resume(): thawed');
  await waitFor(() => ticks > held);
  t.check(ticks > held, 'it runs again', [held, ticks]);
  const report = await ticker.terminate({ grace: 2000 });
  t.check(report.leftovers.length === 0 && liveWith(T).length === 0, 'terminate() after resume', report);

  // Sealed: its own PID namespace; the harness is not there to be killed.
  if (capabilities().seal.available) {
    const sealed = await run('sh', ['-c', `[ -e /proc/${process.pid} ] && echo harness-visible; kill -9 -1; echo $$`], { seal: true });
    t.check(sealed.exitCode === 0 && Number(sealed.stdout) <= 3, 'sealed: its own processes only', [sealed.exitCode, sealed.stdout, sealed.stderr]);
    t.check(running(process.pid), 'the harness lives');
  } else {
    t.note('sealSkipped', capabilities().seal.why);
  }

  // A worker thread: the addon's environment there runs its own calls.
  T = token();
  const worker = new Worker(path.join(here, '_worker-call.mjs'), { workerData: { T } });
  const answer = await new Promise((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  await new Promise((resolve) => worker.once('exit', resolve));
  t.check(answer.stdout === `worker ${T}\n` && answer.exitCode === 0 && answer.cleanup === null, 'a call run in a worker', answer);
  t.check(liveWith(T).length === 0, 'the worker left nothing', liveWith(T));
});

