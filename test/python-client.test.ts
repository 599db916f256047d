// The Python client (clients/python) from `npm test`: its unittest suite
// against this checkout's server, module by module (jobs and terminals
// included); the README's Python examples, run as written and compared with
// the output shown; and the npm package carrying what
// `pip install node_modules/proctree/clients/python` needs.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '..');
const client = path.join(root, 'clients', 'python');
const server = `${JSON.stringify(process.execPath)} ${JSON.stringify(path.join(root, 'bin', 'proctree.js'))} serve`;

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

function python(args: string[], env: NodeJS.ProcessEnv, cwd = root): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const child = spawn('python3', args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], env: { ...env, PYTHONDONTWRITEBYTECODE: '1' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** The environment without a server or package path of the caller's. */
function userEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = { ...process.env, ...extra };
  delete env.PROCTREE_SERVER;
  if (!('PYTHONPATH' in extra)) delete env.PYTHONPATH;
  return env;
}

describe('clients/python: python3 -m unittest against a real server', () => {
  const modules: [string, string[]][] = [
    ['test_asyncio', ['test_fifty_concurrent_calls', 'test_cancelling_a_run_stops_its_escaping_tree', 'test_wait_for_around_run_stops_a_setsid_daemon']],
    ['test_blocking', ['test_sigkill_of_the_client_ends_all_its_calls_within_1s', 'test_double_fork_setsid_leaves_zero_survivors']],
    [
      'test_jobs',
      [
        'test_a_dev_server_kept_as_a_job_answers_after_run_is_listed_readable_and_stopped',
        'test_a_background_dev_server_survives_run_and_job_stop_ends_it',
        'test_cancelling_a_wait_on_a_job_does_not_stop_it',
        'test_a_background_job_through_the_blocking_api',
        'test_sigkill_of_the_client_kills_its_jobs',
      ],
    ],
    ['test_terminal', ['test_tty_stty_size_resize_typing_and_the_end_of_input', 'test_run_with_a_terminal_returns_what_it_showed', 'test_a_terminal_through_the_blocking_api']],
    ['test_memory', ['test_200mb_with_max_output_keeps_client_and_server_under_100mb']],
    ['test_seal', ['test_where_it_cannot_seal_nothing_runs']],
    [
      'test_ports',
      [
        'test_run_returns_once_the_server_listens_and_ports_agree',
        'test_call_ports_of_a_spawned_server',
        'test_ready_timeout_stops_the_tree_with_nothing_left',
        'test_ready_through_the_blocking_api',
      ],
    ],
    ['test_package', ['test_pip_installs_the_source_directory_offline', 'test_the_client_inside_the_npm_package_finds_its_own_server']],
    ['test_limits', ['test_a_bad_limit_is_refused_before_it_is_sent', 'test_every_result_carries_the_verdicts', 'test_a_job_pauses_through_the_blocking_api']],
  ];
  it.each(modules)(
    '%s',
    async (module, mustPass) => {
      const r = await python(['-m', 'unittest', '-v', module], { ...process.env, PROCTREE_SERVER: server }, path.join(client, 'tests'));
      const output = r.stdout + r.stderr;
      expect(r.code, output).toBe(0);
      expect(output).toMatch(/^OK( \(skipped=\d+\))?$/m);
      // A test that prints (the memory test shows what it measured) puts its
      // "ok" on a later line.
      for (const name of mustPass) expect(output).toMatch(new RegExp(`^${name} \\(.*\\) \\.\\.\\. (?:ok$|[\\s\\S]*?^ok$)`, 'm'));
    },
    240_000,
  );
});

describe('README: the Python section', () => {
  const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
  const examples = [...readme.matchAll(/```python\n([\s\S]*?)```\s*```text\n([\s\S]*?)```/g)];

  it('has an asyncio example and the install line', () => {
    expect(examples.length).toBeGreaterThanOrEqual(1);
    expect(examples[0][1]).toContain('async with proctree.ProcTree() as pt');
    expect(readme).toContain('pip install ./node_modules/proctree/clients/python');
  });

  it.each(examples.map((m, i) => [i, m[1], m[2]] as const))(
    'example %i prints what the README shows, the server found from the current directory',
    async (_, code, expected) => {
      // As in a project with proctree in node_modules: here the checkout is
      // that package, found by require.resolve from the current directory.
      const r = await python(['-c', code], userEnv({ PYTHONPATH: client }));
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(r.stdout).toBe(expected);
    },
    60_000,
  );

  it('the npm package carries what pip needs, and no tests', () => {
    const npmCli = path.resolve(process.execPath, '..', '..', 'lib', 'node_modules', 'npm', 'bin', 'npm-cli.js');
    const cli = process.env.npm_execpath?.endsWith('.js') ? process.env.npm_execpath : npmCli;
    const packed = spawnSync(process.execPath, [cli, 'pack', '--dry-run', '--json', '--ignore-scripts', '--loglevel=error'], { cwd: root, encoding: 'utf8' });
    expect(packed.status, packed.stderr).toBe(0);
    const files = (JSON.parse(packed.stdout) as [{ files: { path: string }[] }])[0].files.map((f) => f.path);
    const python = files.filter((f) => f.startsWith('clients/python/'));
    for (const needed of [
      'clients/python/pyproject.toml',
      'clients/python/build_backend/proctree_build.py',
      'clients/python/proctree/__init__.py',
      'clients/python/proctree/py.typed',
      'clients/python/proctree_client.py',
    ]) {
      expect(python).toContain(needed);
    }
    expect(python.filter((f) => f.includes('/tests/') || f.includes('__pycache__') || f.includes('/dist/'))).toEqual([]);
  });
});
