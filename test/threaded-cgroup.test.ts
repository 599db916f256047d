// A tool call may turn a cgroup below its leaf into a threaded one
// (cgroup.type "threaded") and move threads there. The kernel then refuses
// to list that cgroup's processes (reading its cgroup.procs fails with
// ENOTSUP): members() and the ladder must still find them, from
// cgroup.threads, so every member gets the graceful signal, nothing waits out
// the grace, and the report carries no error.
import { once } from 'node:events';

import { afterAll, describe, expect, it } from 'vitest';

import { capabilities, type ToolCall } from '../dist/cjs/index.js';
import { killTokens, liveWith, token, waitForLive } from './helpers';
import { fileSupervisors } from './supervisors';

const { supervisor, cgroups } = fileSupervisors('threaded');
const tokens: string[] = [];
afterAll(() => killTokens(tokens));

const cgroupTier = capabilities().tier === 'cgroup';

// Python: makes <leaf>/t threaded, moves a thread of its own and a child
// `sleep` (one thread) into it, says "ready", and on SIGTERM says "term".
const py = `
import os, signal, subprocess, sys, threading, time
mnt = [l.split()[4] for l in open('/proc/self/mountinfo') if ' - cgroup2 ' in l][0]
leaf = mnt + [l.strip()[3:] for l in open('/proc/self/cgroup') if l.startswith('0::')][0]
os.mkdir(leaf + '/t')
open(leaf + '/t/cgroup.type', 'w').write('threaded')
child = subprocess.Popen(['sleep', sys.argv[1]])
open(leaf + '/t/cgroup.threads', 'w').write(str(child.pid))
moved = threading.Event()
def worker():
    # SIGTERM is for the main thread, where Python runs its handler.
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
    open(leaf + '/t/cgroup.threads', 'w').write(str(threading.get_native_id()))
    moved.set()
    time.sleep(300)
threading.Thread(target=worker, daemon=True).start()
moved.wait(60)
def on_term(*_):
    print('term', flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
print('ready', flush=True)
time.sleep(300)
`;

describe.skipIf(!cgroupTier)('a threaded cgroup inside a call', () => {
  it('members() lists its processes and the ladder SIGTERMs each', async () => {
    const t = token();
    tokens.push(t);
    const sup = supervisor();
    const call: ToolCall = sup.spawn('python3', ['-c', py, t], { stdio: ['ignore', 'pipe', 'inherit'] });
    if (call.cgroup) cgroups.push(call.cgroup);
    const errors: Error[] = [];
    call.on('error', (e: Error) => errors.push(e));
    let out = '';
    call.stdout?.on('data', (d: Buffer) => (out += d.toString()));
    const closed = once(call, 'close');
    const deadline = Date.now() + 20_000;
    while (!out.includes('ready') && Date.now() < deadline && call.exitCode === null) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(out).toContain('ready');
    const [sleeper] = await waitForLive(t, 1, 'sleep');
    expect(sleeper).toBeGreaterThan(0);
    // The kernel's view first: t refuses cgroup.procs, lists the threads.
    expect([...call.members()].sort((a, b) => a - b)).toEqual([call.pid as number, sleeper].sort((a, b) => a - b));

    // A grace far longer than the test: were a member missed, SIGKILL
    // would come only after it (and the report would count it killed).
    const report = await call.terminate({ grace: 60_000 });
    await closed;
    expect(errors).toEqual([]);
    expect(report.signaled).toBe(2);
    expect(report.killed).toBe(0);
    expect(report.leftovers).toEqual([]);
    expect(out).toContain('term');
    expect(liveWith(t)).toEqual([]);
  });
});
