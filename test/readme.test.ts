// The README cannot rot: its JavaScript examples run as written (through the
// package's own name) and print what it shows, and its Quick start command
// stops the tree it promises to stop. (Its console and Python blocks are run
// by cli.test.ts; its `npm install` and `npm test` lines by CI.)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '..');
const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');

describe('README', () => {
  const examples = [...readme.matchAll(/```js\n([\s\S]*?)```\s*(?:Output:\s*)?```text\n([\s\S]*?)```/g)];

  it('has runnable examples', () => {
    expect(examples.length).toBeGreaterThanOrEqual(2);
  });

  it.each(examples.map((m, i) => [i, m[1], m[2]] as const))('example %i prints what the README shows', (i, code, expected) => {
    // Inside the package, so require('proctree') resolves to this checkout.
    const file = path.join(root, 'test', `.readme-${process.pid}-${i}.cjs`);
    fs.writeFileSync(file, code);
    try {
      const r = spawnSync(process.execPath, [file], { encoding: 'utf8', timeout: 20_000 });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      expect(r.stdout).toBe(expected);
    } finally {
      fs.rmSync(file, { force: true });
    }
  });

  it('the Quick start stops the tree with nothing left', () => {
    const block = /<!-- quickstart -->\n```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
    const [first, second] = block.trim().split('\n');
    expect(second).toBe('npm test');
    expect(first.startsWith('npm install && npx proctree run ')).toBe(true);
    const command = first.replace('npm install && npx proctree', `${JSON.stringify(process.execPath)} bin/proctree.js`);
    const r = spawnSync('bash', ['-c', command], { cwd: root, encoding: 'utf8', timeout: 20_000 });
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('started\n');
    const report = JSON.parse(/proctree: cleanup (\{.*\})/.exec(r.stderr)?.[1] ?? 'null');
    expect(report).toMatchObject({ reason: 'leftovers', signaled: 2, escaped: 1, killed: 0, leftovers: [] });
  });
});
