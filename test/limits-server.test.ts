// `proctree serve`'s side of limits and pauses (protocol 4), as a real process over
// its stdin/stdout: spawn's `limits` (refused here, where the cgroup2 mount
// has no controllers, with ERR_PROCTREE_LIMITS_UNAVAILABLE and no events;
// bad values refused by the schema), the verdicts in `close`, and
// pauseTree/resumeTree/jobPause/jobResume, proved by cgroup.events. Every
// line the server writes is checked against docs/protocol.schema.json.
import fs from 'node:fs';

import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { capabilities } from '../dist/cjs/index.js';
import { ServerProcess as Server, stopServers } from './protocol-server';
import { killTokens, token } from './helpers';

const tokens: string[] = [];
const caps = capabilities();
const noControllers = caps.tier === 'cgroup' && !caps.limits.memory && !caps.limits.pids && !caps.limits.cpu;

function events(cgroup: string): string {
  return fs.readFileSync(`${cgroup}/cgroup.events`, 'utf8');
}

afterEach(() => killTokens(tokens.splice(0)));
afterAll(async () => {
  await stopServers();
});

describe('proctree serve: limits and pauses (protocol 4)', () => {
  it('says protocol 4 or later, and capabilities carry limits', async () => {
    const s = new Server();
    const res = await s.request('capabilities');
    expect(res).toMatchObject({ ok: true });
    expect(res.protocol).toBeGreaterThanOrEqual(4);
    expect((res.capabilities as { limits: unknown }).limits).toEqual(JSON.parse(JSON.stringify(caps.limits)));
  });

  it.skipIf(!noControllers)('spawn with limits it cannot enforce: ERR_PROCTREE_LIMITS_UNAVAILABLE, and no events', async () => {
    const s = new Server();
    const res = await s.request('spawn', { id: 'l', file: 'true', options: { limits: { memoryBytes: 512 * 2 ** 20, pids: 256, cpu: 1.5 } } });
    expect(res.ok).toBe(false);
    expect(res.error?.code).toBe('ERR_PROCTREE_LIMITS_UNAVAILABLE');
    expect(res.error?.message).toMatch(/memory,pids,cpu: not on this cgroup2 hierarchy/);
    expect(s.events('l')).toEqual([]);
  });

  it('limits out of the schema are refused before anything runs', async () => {
    const s = new Server();
    for (const limits of [{ pids: 0 }, { memoryBytes: 1000 }, { cpu: 0 }, { pids: 1.5 }, { swap: 1 }]) {
      const res = await s.request('spawn', { id: 'bad', file: 'true', options: { limits } }, true);
      expect(res.error?.code, JSON.stringify(limits)).toBe('ERR_PROCTREE_INVALID_REQUEST');
    }
    expect(s.events('bad')).toEqual([]);
  });

  it('close carries the verdicts', async () => {
    const s = new Server();
    await s.request('spawn', { id: 'v', file: 'true' });
    expect(await s.closed('v')).toMatchObject({ code: 0, oomKilled: false, pidsLimited: false });
  });

  it.skipIf(caps.tier !== 'cgroup')('pauseTree and resumeTree answer once cgroup.events shows it; terminate still works', async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    const res = await s.request('spawn', { id: 'p', file: 'sh', args: ['-c', `while :; do :; done # ${t}`] });
    const cgroup = res.cgroup as string;
    expect(await s.request('pauseTree', { id: 'p' })).toMatchObject({ ok: true, paused: true });
    expect(events(cgroup)).toMatch(/^frozen 1$/m);
    expect(await s.request('resumeTree', { id: 'p' })).toMatchObject({ ok: true, paused: false });
    expect(events(cgroup)).toMatch(/^frozen 0$/m);
    expect(await s.request('pauseTree', { id: 'p' })).toMatchObject({ paused: true });
    const stopped = await s.request('terminate', { id: 'p', grace: 0 });
    expect(stopped).toMatchObject({ ok: true, report: { leftovers: [] } });
    expect(await s.closed('p')).toMatchObject({ oomKilled: false, pidsLimited: false });
    expect((await s.request('pauseTree', { id: 'p' })).error?.code).toBe('ERR_PROCTREE_UNKNOWN_CALL');
  });

  it.skipIf(caps.tier !== 'cgroup')('jobPause and jobResume pause a job; jobs lists it paused', async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    const res = await s.request('spawn', { id: 'j', file: 'sleep', args: [t], options: { background: true } });
    const jobId = res.jobId as string;
    expect(await s.request('jobPause', { job: jobId })).toMatchObject({ ok: true, paused: true });
    expect(events(res.cgroup as string)).toMatch(/^frozen 1$/m);
    const listed = (await s.request('jobs')).jobs as Array<{ id: string; paused: boolean }>;
    expect(listed.find((j) => j.id === jobId)?.paused).toBe(true);
    expect(await s.request('jobResume', { job: jobId })).toMatchObject({ ok: true, paused: false });
    expect(events(res.cgroup as string)).toMatch(/^frozen 0$/m);
    await s.request('jobStop', { job: jobId, grace: 0 });
    expect((await s.request('jobPause', { job: 'c999999' })).error?.code).toBe('ERR_PROCTREE_UNKNOWN_JOB');
  });

  it.skipIf(!caps.probes.pgroup.ok)('pauseTree of a pgroup call: ERR_PROCTREE_PAUSE_UNSUPPORTED', async () => {
    const s = new Server();
    const t = token();
    tokens.push(t);
    await s.request('spawn', { id: 'g', file: 'sleep', args: [t], options: { confinement: 'pgroup' } });
    const res = await s.request('pauseTree', { id: 'g' });
    expect(res.error?.code).toBe('ERR_PROCTREE_PAUSE_UNSUPPORTED');
    await s.request('terminate', { id: 'g', grace: 0 });
  });
});
