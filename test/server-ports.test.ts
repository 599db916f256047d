// `proctree serve`'s side of ports and readiness (protocol 3), as a real process over
// its stdin/stdout: options.ready and the ready event, the ports and
// jobPorts requests, jobs with their ports, and a not-ready cleanup that
// leaves nothing. Every line the server writes is checked against
// docs/protocol.schema.json; survivors are found by a /proc scan.
import net from 'node:net';

import { afterAll, describe, expect, it } from 'vitest';

import { ServerProcess as Server, stopServers } from './protocol-server';
import { killTokens, liveWith, token, waitForLive } from './helpers';

const tokens: string[] = [];
afterAll(async () => {
  await stopServers();
  killTokens(tokens);
});

const server = String.raw`
import socket, sys, time
time.sleep(float(sys.argv[1]))
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 0)); s.listen()
print('up', s.getsockname()[1], flush=True)
time.sleep(float(sys.argv[2]))
`;

function connects(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1');
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}

describe('proctree serve: ports and ready', () => {
  it('a background call with ready: the ready event carries the listener; ports, jobPorts and jobs agree', async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    const answer = await s.request('spawn', {
      id: 'web',
      file: 'python3',
      args: ['-c', server, '0.3', t],
      options: { background: true, ready: { listening: true, outputPattern: 'up \\d+', timeout: 20000 } },
    });
    expect(answer.ok).toBe(true);
    const ready = await s.waitFor((m) => m.event === 'ready' && m.id === 'web');
    const [pid] = await waitForLive(t, 1, 'python3');
    const listening = ready.listening as Array<{ port: number }>;
    expect(listening).toEqual([{ protocol: 'tcp', address: '127.0.0.1', port: listening[0]?.port, pid }]);
    expect(ready.output).toBe(`up ${listening[0]?.port}`);
    expect(await connects(listening[0]?.port as number)).toBe(true);

    const byCall = await s.request('ports', { id: 'web' });
    expect(byCall.ports).toEqual(listening);
    const byJob = await s.request('jobPorts', { job: answer.jobId });
    expect(byJob.ports).toEqual(listening);
    const list = await s.request('jobs');
    expect((list.jobs as Array<{ id: string; ports: unknown }>).find((j) => j.id === answer.jobId)?.ports).toEqual(listening);

    await s.request('jobStop', { job: answer.jobId });
    expect((await s.request('jobPorts', { job: answer.jobId })).ports).toEqual([]);
    await s.request('shutdown');
  });

  it("ready.timeout: the cleanup's reason is not-ready and nothing is left", async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    await s.request('spawn', {
      id: 'slow',
      file: 'bash',
      args: ['-c', `setsid sleep ${t} & sleep ${t}`],
      options: { background: true, ready: { listening: true, timeout: 300 } },
    });
    const cleanup = await s.waitFor((m) => m.event === 'cleanup' && m.id === 'slow');
    expect(cleanup.report).toMatchObject({ reason: 'not-ready', leftovers: [] });
    await s.waitFor((m) => m.event === 'close' && m.id === 'slow');
    expect(s.messages.some((m) => m.event === 'ready')).toBe(false);
    expect(liveWith(t)).toEqual([]);
    await s.request('shutdown');
  });

  it('refuses a ready with both output and outputPattern, and a bad pattern', async () => {
    const s = new Server();
    for (const ready of [{ output: 'a', outputPattern: 'b' }, { outputPattern: '(' }]) {
      const r = await s.request('spawn', { id: 'x', file: 'true', options: { background: true, ready } });
      expect(r).toMatchObject({ ok: false, error: { code: 'ERR_INVALID_ARG_VALUE' } });
    }
    const unknown = await s.request('ports', { id: 'nope' });
    expect(unknown).toMatchObject({ ok: false, error: { code: 'ERR_PROCTREE_UNKNOWN_CALL' } });
    await s.request('shutdown');
  });
});
