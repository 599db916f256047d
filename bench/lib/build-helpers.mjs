// The bench's C programs (the clone3 floor, the process-tree maker, the
// cgroup.kill floor, the sealed floor) are compiled with the system's C
// compiler at bench time into bench/.build/.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export function buildHelpers(benchDir) {
  const out = path.join(benchDir, '.build');
  fs.mkdirSync(out, { recursive: true });
  const cc = process.env.CC || 'cc';
  const bin = {};
  for (const name of ['floor', 'tree', 'cgkill', 'sealfloor']) {
    const src = path.join(benchDir, 'c', `${name}.c`);
    const exe = path.join(out, name);
    const inputs = [src, path.join(benchDir, 'c', 'clone3.h')];
    const fresh = fs.existsSync(exe) && inputs.every((f) => fs.statSync(exe).mtimeMs >= fs.statSync(f).mtimeMs);
    if (!fresh) execFileSync(cc, ['-O2', '-Wall', '-o', exe, src], { stdio: 'inherit' });
    bin[name] = exe;
  }
  return bin;
}
