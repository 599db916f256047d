// A harness compiled into one file with `bun build --compile` (see
// test/runtimes.test.ts): proctree's addon is embedded through its loader's
// literal require, the helper by being one more entry point of the build.
// It runs a call whose daemon escapes and prints one JSON line: what the
// call returned, and the executable its guardian runs (the helper copied out
// of this file, read from /proc).
import fs from 'node:fs';

import { capabilities, run } from 'proctree';

const T = process.argv[2] ?? '300';
const r = await run('sh', ['-c', `echo ok; setsid sleep ${T} & sleep 0.2`], { grace: 500 });
let guardianExe: string | null = null;
for (const entry of fs.readdirSync('/proc')) {
  try {
    if (!/^\d+$/.test(entry) || fs.readFileSync(`/proc/${entry}/comm`, 'utf8').trim() !== 'proctree-guard') continue;
    if (!fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(`proctree-${process.pid}-`)) continue;
    guardianExe = fs.readlinkSync(`/proc/${entry}/exe`);
  } catch {
    // gone while we looked
  }
}
const caps = capabilities();
console.log(
  JSON.stringify({
    pid: process.pid,
    stdout: r.stdout,
    exitCode: r.exitCode,
    reason: r.cleanup?.reason ?? null,
    leftovers: r.cleanup?.leftovers.length ?? null,
    verified: r.cleanup?.verified ?? null,
    tier: caps.tier,
    helperProbe: caps.probes.helper.ok,
    guardianExe,
  }),
);
