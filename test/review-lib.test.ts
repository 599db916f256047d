// Fixes from a review of lib/: run(file, options) reads run's own options,
// validation with Node's codes and wording, the reason a ladder's report
// carries, and when a kept job started.
import { afterAll, describe, expect, it } from 'vitest';

import { Supervisor, type ToolCall } from '../dist/cjs/index.js';
import { killCgroup, token } from './helpers';

const supervisors: Supervisor[] = [];
const calls: ToolCall[] = [];
afterAll(async () => {
  for (const c of calls) killCgroup(c.cgroup);
  await Promise.all(supervisors.map((s) => s.shutdown({ grace: 0 })));
});

let named = 0;
function supervisor(options: ConstructorParameters<typeof Supervisor>[0] = {}): Supervisor {
  const s = new Supervisor({ name: `review-${process.pid}-${++named}`, ...options });
  supervisors.push(s);
  return s;
}

describe('run(file, options) is run(file, [], options)', () => {
  it('reads input and encoding from the options given in the place of args', async () => {
    const sup = supervisor();
    const text = await sup.run('cat', { input: 'hello\n' });
    expect(text.stdout).toBe('hello\n');
    const bytes = await sup.run('cat', { input: 'hi', encoding: 'buffer' });
    expect(Buffer.isBuffer(bytes.stdout)).toBe(true);
    expect(bytes.stdout.toString()).toBe('hi');
    expect(await sup.run('cat', [], { input: 'same' })).toMatchObject({ stdout: 'same' });
  });
});

describe("the report of a ladder that found nothing says why it was asked for", () => {
  it.each(['subreaper', 'pidns'] as const)('%s: a shutdown while the start is pending, and the start fails', async (confinement) => {
    const sup = supervisor();
    const call = sup.spawn(`/nonexistent-${token()}`, [], { confinement, stdio: 'ignore' });
    call.on('error', () => {});
    // The shim has not confirmed the start yet: the ladder is asked for first.
    expect(call.pid).toBeUndefined();
    const [report] = await sup.shutdown();
    expect(report.reason).toBe('shutdown');
    expect(report.leftovers).toEqual([]);
  });
});
