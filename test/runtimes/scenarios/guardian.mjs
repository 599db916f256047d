// A harness SIGKILLed: a harness process started by this scenario (same
// runtime) makes 5 calls with escaping trees, is SIGKILLed by its pid, and
// its guardian (proctree-helper) must remove every process of every call and
// the harness's subtree, and exit. Proved by /proc and the cgroup files.
import { spawn as cpSpawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { self } from '../runtimes.mjs';
import { scenario, here, packageRoot, token, liveWith, cgroupMembers, waitFor, waitForLive } from './_lib.mjs';

scenario('guardian', async (t) => {
  const T = token();
  const { command, args } = self(path.join(here, '_harness.cjs'));
  const child = cpSpawn(command, [...args, T], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, PROCTREE_PACKAGE_ROOT: packageRoot },
  });
  try {
    const line = await new Promise((resolve, reject) => {
      let buf = '';
      child.stdout.on('data', (d) => {
        buf += d;
        if (buf.includes('\n')) resolve(buf.slice(0, buf.indexOf('\n')));
      });
      child.once('exit', (code, sig) => reject(new Error(`harness exited (${code}, ${sig}) before it was ready: ${buf}`)));
    });
    const { group, leaves } = JSON.parse(line);
    t.note('harnessPid', child.pid);
    t.check(path.basename(group).startsWith(`proctree-${child.pid}-`), "the harness's subtree is named by its pid", group);
    t.check(cgroupMembers(group).length === 15, '15 processes in the subtree', cgroupMembers(group).length);
    // members() counts a forked bash that has not exec'd sleep yet: wait for the sleepers.
    t.check((await waitForLive(T, 15, 'sleep')).length === 15, '15 sleepers in /proc', liveWith(T, 'sleep').length);
    const guardians = () => liveWith(`proctree-${child.pid}-`, 'proctree-guard');
    t.check(guardians().length === 1, 'one guardian', guardians());

    const exited = new Promise((resolve) => child.once('exit', (_code, sig) => resolve(sig)));
    child.kill('SIGKILL');
    t.check((await exited) === 'SIGKILL', 'harness died of SIGKILL');
    await waitFor(() => liveWith(T).length === 0 && !fs.existsSync(group) && guardians().length === 0, 10000);
    t.check(liveWith(T).length === 0, 'every escapee gone', liveWith(T));
    t.check(leaves.every((l) => !fs.existsSync(l)) && !fs.existsSync(group), 'the subtree removed', group);
    t.check(guardians().length === 0, 'the guardian exited', guardians());
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
});
