// The failure modes of process-tree cleanup (the reference's section 2), each
// built for real and checked from the kernel's side: a /proc scan for the
// test's unique token and the call's cgroup being gone.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { spawn, type ToolCall } from '../dist/cjs/index.js';
import { cgroupMembers, killCgroup, liveWith, startCanary, token, waitForLive, leafReleased } from './helpers';

const canary = startCanary();
const calls: ToolCall[] = [];

function track(call: ToolCall): ToolCall {
  calls.push(call);
  call.on('error', () => {});
  return call;
}

beforeAll(async () => {
  await waitForLive(canary.needle, 1);
});

afterAll(() => {
  for (const c of calls) killCgroup(c.cgroup);
  // The canary started outside every call: every ladder must have missed it.
  expect(liveWith(canary.needle)).toHaveLength(1);
  canary.child.kill('SIGKILL');
});

// Waits for `started` sleepers carrying the token, then stops the call.
async function stopAndCheck(call: ToolCall, needle: string, started: number) {
  const members = await waitForLive(needle, started, 'sleep');
  expect(members.length).toBeGreaterThanOrEqual(started);
  const cg = call.cgroup as string;
  // Everything the call started is in its cgroup, whatever its session.
  for (const pid of members) expect(cgroupMembers(cg)).toContain(pid);
  const report = await call.terminate({ grace: 1000 });
  await call.done;
  expect(liveWith(needle)).toEqual([]);
  expect(leafReleased(cg)).toBe(true);
  expect(report.leftovers).toEqual([]);
  expect(report.verified).toBe('cgroup.events');
  return report;
}

describe('escapes that killpg misses, all stopped', () => {
  it('double-fork + setsid', async () => {
    const t = token();
    const call = track(spawn('bash', ['-c', `(setsid sleep ${t} &) ; sleep ${t}`], { stdio: 'ignore' }));
    const report = await stopAndCheck(call, t, 2);
    // bash execs its last command: the main sleep and the escaped one.
    expect(report.signaled).toBe(2);
    expect(report.escaped).toBe(1);
    expect(report.killed).toBe(0);
  });

  it('setpgid into a group of its own', async () => {
    const t = token();
    const py = `import os; os.setpgid(0, 0); os.execvp("sleep", ["sleep", "${t}"])`;
    const call = track(spawn('bash', ['-c', `python3 -c '${py}' & sleep ${t}`], { stdio: 'ignore' }));
    const report = await stopAndCheck(call, t, 2);
    expect(report.escaped).toBe(1);
  });

  it('nohup … & disown', async () => {
    const t = token();
    const call = track(
      spawn('bash', ['-c', `nohup sleep ${t} >/dev/null 2>&1 & disown; sleep ${t}`], { stdio: 'ignore' }),
    );
    await stopAndCheck(call, t, 2);
  });

  it('a 20-deep chain of setsid daemons', async () => {
    const t = token();
    // Each level starts the next in a new session and exits: twenty orphans'
    // worth of reparenting, one sleeper at the bottom.
    const script = `n=$1; if [ "$n" -gt 0 ]; then setsid bash -c "$0" "$0" $((n-1)) & fi; exec sleep ${t}`;
    const call = track(spawn('bash', ['-c', script, script, '20'], { stdio: 'ignore' }));
    const report = await stopAndCheck(call, t, 21);
    expect(report.escaped).toBeGreaterThanOrEqual(20);
  });

  it('SIGTERM ignored: killed once grace runs out', async () => {
    const t = token();
    const call = track(spawn('bash', ['-c', `trap '' TERM; sleep ${t} & setsid sleep ${t} & wait`], { stdio: 'ignore' }));
    await waitForLive(t, 2, 'sleep');
    const grace = 400;
    const report = await call.terminate({ grace });
    await call.done;
    expect(report.signaled).toBe(3);
    expect(report.killed).toBe(3);
    // SIGKILL came when grace ran out, not before.
    expect(report.durationMs).toBeGreaterThanOrEqual(grace);
    expect(liveWith(t)).toEqual([]);
    expect(call.signalCode).toBe('SIGKILL');
  });

  it('a SIGSTOPped escapee still gets its SIGTERM and dies', async () => {
    const t = token();
    const call = track(spawn('bash', ['-c', `setsid sleep ${t} & sleep ${t}`], { stdio: 'ignore' }));
    const [first] = await waitForLive(t, 2, 'sleep');
    // Processes this test started, by the pids the scan just found.
    for (const pid of liveWith(t, 'sleep')) process.kill(pid, 'SIGSTOP');
    const report = await call.terminate({ grace: 3000 });
    await call.done;
    expect(first).toBeGreaterThan(0);
    // SIGCONT after SIGTERM lets a stopped member act on it: no SIGKILL needed.
    expect(report.killed).toBe(0);
    expect(liveWith(t)).toEqual([]);
  });

  it('a descendant that keeps forking during the ladder leaves no survivor', async () => {
    const t = token(30);
    // Bounded: at most 3000 forks, one every 2 ms (about 6 s if never stopped).
    const script = `for i in $(seq 1 3000); do (setsid sleep ${t} &); sleep 0.002; done`;
    const call = track(spawn('bash', ['-c', script], { stdio: 'ignore' }));
    await waitForLive(t, 20, 'sleep');
    const report = await call.terminate({ grace: 300 });
    await call.done;
    expect(report.signaled).toBeGreaterThan(20);
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(call.cgroup)).toBe(true);
  });

  it('a daemon that moves into a nested cgroup of the call is still stopped', async () => {
    const t = token();
    // runc's kill.bats case: the tool call creates cgroups of its own inside
    // its leaf and moves a daemon there. The leaf's path comes on stdin from
    // the harness, which knows it: guessing the cgroup2 mount from
    // /proc/self/mountinfo breaks on a host with a second cgroup2 mount.
    const script = [
      'read -r cg',
      `mkdir "$cg/inner"`,
      `(setsid sh -c "echo \\$\\$ > $cg/inner/cgroup.procs; exec sleep ${t}" &)`,
      `sleep ${t}`,
    ].join('; ');
    const call = track(spawn('bash', ['-c', script], { stdio: ['pipe', 'ignore', 'ignore'] }));
    await new Promise((r) => call.once('spawn', r));
    call.stdin?.end(`${call.cgroup}\n`);
    await waitForLive(t, 2, 'sleep');
    const inner = `${call.cgroup}/inner`;
    const deadline = Date.now() + 3000;
    while (cgroupMembers(inner).length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(cgroupMembers(inner)).toHaveLength(1);
    const report = await call.terminate({ grace: 1000 });
    await call.done;
    expect(report.signaled).toBe(2);
    expect(liveWith(t)).toEqual([]);
    expect(leafReleased(call.cgroup)).toBe(true);
  });
});
