// spawn() and run() basics: output, input, exit codes, signals, a command
// that cannot start, a call's streams and events.
import { AsyncLocalStorage } from 'node:async_hooks';

import { load, scenario, leafReleased, cgroupOf } from './_lib.mjs';

scenario('basics', async (t) => {
  const { run, spawn } = load();

  const r = await run('sh', ['-c', 'echo out; echo err >&2; exit 3']);
  t.check(r.exitCode === 3 && r.signal === null, 'exit code 3', [r.exitCode, r.signal]);
  t.check(r.stdout === 'out\n' && r.stderr === 'err\n', 'stdout and stderr', [r.stdout, r.stderr]);
  t.check(r.confinement === 'cgroup' && r.cleanup === null, 'cgroup tier, nothing to clean', [r.confinement, r.cleanup]);
  t.check(leafReleased(r.cgroup), 'leaf released');

  const echoed = await run('sh', ['-c', 'tr a-z A-Z'], { input: 'hello from stdin\n' });
  t.check(echoed.stdout === 'HELLO FROM STDIN\n', 'input', echoed.stdout);

  const sig = await run('sh', ['-c', 'kill -USR1 $$']);
  t.check(sig.exitCode === null && sig.signal === 'SIGUSR1', 'ended by a signal', [sig.exitCode, sig.signal]);

  const env = await run('sh', ['-c', 'echo "$PROCTREE_X"; pwd'], { env: { PATH: process.env.PATH, PROCTREE_X: 'x1' }, cwd: '/tmp' });
  t.check(env.stdout === 'x1\n/tmp\n', 'env and cwd', env.stdout);

  const err = await run('no-such-tool-proctree').then(
    () => null,
    (e) => e,
  );
  t.check(err && err.code === 'ENOENT' && err.syscall === 'spawn no-such-tool-proctree' && err.step === 'execve', 'ENOENT rejects', err && { code: err.code, syscall: err.syscall, step: err.step });

  // spawn(): the ChildProcess-shaped call, its events in order.
  const call = spawn('sh', ['-c', 'read line; echo "got $line"; echo warn >&2; exit 5']);
  const seen = [];
  for (const ev of ['spawn', 'exit', 'empty', 'close']) call.on(ev, () => seen.push(ev));
  let out = '';
  let errOut = '';
  call.stdout.setEncoding('utf8').on('data', (c) => (out += c));
  call.stderr.setEncoding('utf8').on('data', (c) => (errOut += c));
  t.check(typeof call.pid === 'number' && call.pid > 0, 'pid', call.pid);
  const cg = call.cgroup;
  t.check(cgroupOf(call.pid) !== null && cg.endsWith(cgroupOf(call.pid)), 'the command runs in the call leaf', [cg, cgroupOf(call.pid)]);
  call.stdin.end('ping\n');
  const [code, signal] = await new Promise((resolve) => call.on('close', (c, s) => resolve([c, s])));
  t.check(code === 5 && signal === null, 'close(5, null)', [code, signal]);
  t.check(out === 'got ping\n' && errOut === 'warn\n', 'streams', [out, errOut]);
  t.check(seen.join() === 'spawn,exit,empty,close', 'events in order', seen);

  // Reading stdout to its end, then waiting for 'exit': what the pipe held
  // at the exit, and its end, come before 'exit', as with child_process.
  let missed = 0;
  for (let i = 0; i < 3; i++) {
    const cat = spawn('cat', []);
    cat.stdin.end(Buffer.alloc(1 << 20, 'a'));
    let n = 0;
    for await (const chunk of cat.stdout) n += chunk.length;
    const exited = await Promise.race([
      new Promise((resolve) => cat.once('exit', () => resolve(true))),
      new Promise((resolve) => setTimeout(resolve, 10_000, false)),
    ]);
    if (n !== 1 << 20 || !exited) missed++;
    cat.kill('SIGKILL');
  }
  t.check(missed === 0, "for await over stdout, then 'exit'", missed);

  // A command that cannot start: 'error' then 'close', never a throw.
  const bad = spawn('no-such-tool-proctree', []);
  const failed = await new Promise((resolve) => bad.on('error', resolve));
  await new Promise((resolve) => bad.on('close', resolve));
  t.check(failed.code === 'ENOENT' && bad.pid === undefined, "spawn: 'error' ENOENT, no pid", [failed.code, bad.pid]);

  // A burst in one synchronous run: past its first milliseconds, clones go
  // to spawner threads unwaited; pid (read at once, or with 'spawn') is
  // still each command's own, in its own leaf, and one that cannot start
  // gets 'error' and no pid.
  const burst = Array.from({ length: 40 }, (_, i) => spawn(i % 8 === 7 ? 'no-such-tool-proctree' : 'sleep', ['2']));
  const first = burst[30].pid;
  const ended = await Promise.all(
    burst.map(
      (c) =>
        new Promise((resolve) => {
          let where = null;
          let error = null;
          c.on('spawn', () => (where = cgroupOf(c.pid)));
          c.on('error', (e) => (error = e.code));
          c.on('close', (code) => resolve({ code, error, pid: c.pid, cg: c.cgroup, where }));
        }),
    ),
  );
  const wrong = ended.filter((e, i) =>
    i % 8 === 7 ? e.error !== 'ENOENT' || e.pid !== undefined : e.code !== 0 || !(e.pid > 0) || !e.where || !e.cg.endsWith(e.where),
  );
  t.check(wrong.length === 0 && first === ended[30].pid, 'a burst of 40: own pids in own leaves, ENOENT without a pid', wrong.slice(0, 3));

  // Listeners run in the async context of spawn(): AsyncLocalStorage's store.
  const als = new AsyncLocalStorage();
  const stores = await als.run('mine', () => {
    const c = spawn('sh', ['-c', 'echo out']);
    const got = [];
    c.stdout.on('data', () => got.push(`data:${als.getStore()}`));
    c.on('exit', () => got.push(`exit:${als.getStore()}`));
    return new Promise((resolve) => c.on('close', () => resolve([...got, `close:${als.getStore()}`])));
  });
  t.check(stores.join() === 'data:mine,exit:mine,close:mine', "AsyncLocalStorage's store in the call's listeners", stores);
});
