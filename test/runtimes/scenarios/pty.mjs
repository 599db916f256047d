// A call on a terminal of its own: the size it starts with, a resize the
// command sees, the foreground process, and the whole tree (a setsid daemon
// started on the terminal included) stopped.
import { load, scenario, token, waitFor, waitForLive, liveWith, leafReleased } from './_lib.mjs';

scenario('pty', async (t) => {
  const { spawn, run } = load();
  const T = token();
  const script = `[ -t 0 ] && [ -t 1 ] && echo on-a-tty; stty size; read go; stty size; (setsid sleep ${T} &); echo ready; exec sleep ${T}`;
  const call = spawn('sh', ['-c', script], { pty: { cols: 80, rows: 24 } });
  call.on('error', () => {});
  t.check(call.stdout === null && call.pty, 'the terminal replaces stdio');
  let screen = '';
  call.pty.setEncoding('utf8').on('data', (d) => (screen += d));
  await waitFor(() => screen.includes('24 80'));
  t.check(screen.includes('on-a-tty\r\n24 80\r\n'), 'a terminal of 80x24', screen);
  t.check(/^\/dev\/pts\/\d+$/.test(call.pty.path) && call.pty.cols === 80, 'pty.path, cols', [call.pty.path, call.pty.cols]);
  call.resize(120, 40);
  call.pty.write('go\r');
  await waitFor(() => screen.includes('ready'));
  t.check(screen.includes('40 120\r\n'), 'the resize is seen', screen);
  await waitForLive(T, 2, 'sleep');
  const fg = await waitFor(() => {
    const p = call.pty.foreground();
    return p && p.comm === 'sleep' ? p : null;
  }, 5000);
  t.check(fg && fg.pid === call.pid, 'foreground(): the main sleep', fg);
  const report = await call.terminate({ grace: 500 });
  await call.done;
  t.check(report.leftovers.length === 0 && report.escaped >= 1, 'terminate', report);
  t.check(liveWith(T).length === 0 && leafReleased(call.cgroup), 'tree gone', liveWith(T));

  const r = await run('sh', ['-c', 'stty size'], { pty: { cols: 100, rows: 30 } });
  t.check(r.stdout === '30 100\r\n' && r.exitCode === 0, 'run() with pty', r.stdout);
  const typed = await run('sh', ['-c', 'read x; echo "got $x"'], { pty: true, input: 'abc\n' });
  t.check(typed.stdout.includes('got abc'), 'run() with pty: input typed', typed.stdout);
});
