// The Python client's own suite (clients/python), run against this checkout's
// server: escapes through the client leave nothing, and a client killed with
// SIGKILL takes its calls with it within a second.
import { spawn } from 'node:child_process';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '..');

describe('clients/python', () => {
  it('python3 -m unittest passes against a real server', async () => {
    const server = `${JSON.stringify(process.execPath)} ${JSON.stringify(path.join(root, 'bin', 'proctree.js'))} serve`;
    const result = await new Promise<{ code: number | null; output: string }>((resolve, reject) => {
      const child = spawn('python3', ['-m', 'unittest', 'discover', '-s', 'clients/python', '-v'], {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, PROCTREE_SERVER: server, PYTHONDONTWRITEBYTECODE: '1' },
      });
      let output = '';
      child.stdout.on('data', (d: Buffer) => (output += d.toString()));
      child.stderr.on('data', (d: Buffer) => (output += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, output }));
    });
    expect(result.code, result.output).toBe(0);
    expect(result.output).toMatch(/^OK$/m);
    expect(result.output).toMatch(/test_sigkill_of_the_client_ends_all_its_calls_within_1s\b.* \.\.\. ok$/m);
    expect(result.output).toContain('test_double_fork_setsid_leaves_zero_survivors');
    expect(result.output).toContain('test_nohup_disown_leaves_zero_survivors');
  }, 120_000);
});
