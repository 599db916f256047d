// The command line's side of ports and readiness: `proctree run --ready-port` says when
// the tree listens (and --ready-timeout stops a tree that never does, exit
// 124, nothing left), and `proctree ps` shows what each call listens on.
// Checked against the servers' own words and a /proc scan for unique tokens.
import { spawn as cpSpawn, spawnSync } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { killTokens, liveWith, token, waitForLive } from './helpers';

const root = path.resolve(__dirname, '..');
const bin = path.join(root, 'bin', 'proctree.js');
const tokens: string[] = [];
afterAll(() => killTokens(tokens));

// Listens on TCP port <port> after <delay> s, prints "up <port>", sleeps <token> s.
const server = String.raw`
import socket, sys, time
time.sleep(float(sys.argv[1]))
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[2]))); s.listen()
print('up', s.getsockname()[1], flush=True)
time.sleep(float(sys.argv[3]))
`;

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((res) => s.listen(0, '127.0.0.1', res));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise((res) => s.close(res));
  return port;
}

function start(args: string[]): { stderr: () => string; exited: Promise<number | null>; kill: () => void } {
  const child = cpSpawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d: string) => (err += d));
  const exited = new Promise<number | null>((res) => child.once('close', (code) => res(code)));
  return { stderr: () => err, exited, kill: () => child.kill('SIGTERM') };
}

async function until(check: () => boolean, ms = 15000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('proctree run --ready-port', () => {
  it('says on stderr when the tree listens on the port; ps shows it in PORTS', async () => {
    const t = token();
    tokens.push(t);
    const port = await freePort();
    const run = start(['run', '--ready-port', String(port), '--', 'python3', '-c', server, '0.3', String(port), t]);
    await until(() => run.stderr().includes('proctree: ready'));
    const [pid] = await waitForLive(t, 1, 'python3');
    expect(run.stderr()).toBe(`proctree: ready tcp 127.0.0.1:${port} (pid ${pid})\n`);

    const json = JSON.parse(spawnSync(process.execPath, [bin, 'ps', '--json'], { encoding: 'utf8' }).stdout) as Array<{
      call: string;
      command: string;
      ports: unknown[];
    }>;
    const entry = json.find((c) => c.command.includes(t));
    expect(entry?.ports).toEqual([{ protocol: 'tcp', address: '127.0.0.1', port, pid }]);
    // The command spans lines (the script): its row is the one naming the call.
    const ps = spawnSync(process.execPath, [bin, 'ps'], { encoding: 'utf8' });
    const line = ps.stdout.split('\n').find((l) => l.includes(` ${entry?.call} `));
    expect(line).toMatch(new RegExp(`\\s${port}/tcp\\s+\\S*python3 -c`));

    run.kill();
    expect(await run.exited).toBe(143);
    expect(liveWith(t)).toEqual([]);
  });

  it('--ready-timeout stops a tree that never listens: exit status 124, nothing left', async () => {
    const t = token();
    tokens.push(t);
    const run = start(['run', '--ready-port', '1', '--ready-timeout', '300ms', '--report', '--', 'bash', '-c', `setsid sleep ${t} & sleep ${t}`]);
    expect(await run.exited).toBe(124);
    expect(run.stderr()).toMatch(/proctree: cleanup \{"reason":"not-ready".*"leftovers":\[\]/);
    expect(liveWith(t)).toEqual([]);
  });

  it('usage errors: --ready-timeout alone, a port that is no port', () => {
    for (const args of [
      ['run', '--ready-timeout', '1s', '--', 'true'],
      ['run', '--ready-port', 'http', '--', 'true'],
      ['run', '--ready-port', '70000', '--', 'true'],
    ]) {
      const r = spawnSync(process.execPath, [bin, ...args], { encoding: 'utf8' });
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(/^proctree: --ready-(port|timeout)/);
    }
  });
});
