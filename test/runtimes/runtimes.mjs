// The three JavaScript runtimes the scenarios run under, and how each is
// started on a script. Bun and Deno come from the npm registry as pinned
// devDependencies (`bun`, `deno`: each pulls its platform's binary package
// as an optional dependency, so `npm ci` on another platform skips the x64
// ones instead of failing). Plain JS: the vitest file and the scenarios
// (under any runtime) import it.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Binary packages per platform: only linux-x64 (glibc) is proved in CI. */
const binaries = {
  bun: { 'linux-x64': ['@oven/bun-linux-x64', 'bin', 'bun'], 'linux-arm64': ['@oven/bun-linux-aarch64', 'bin', 'bun'] },
  deno: { 'linux-x64': ['@deno/linux-x64-glibc', 'deno'], 'linux-arm64': ['@deno/linux-arm64-glibc', 'deno'] },
};

/**
 * Deno: every permission (-A: the addon is FFI, the calls are subprocesses,
 * /proc and /sys are files), no download of anything. A .cjs or an .mjs that
 * require()s a local CommonJS package needs no other flag.
 */
export const denoFlags = ['run', '-A', '--quiet', '--no-prompt'];

/**
 * `{ name, command, args(script) }` for 'node', 'bun' or 'deno', or
 * `{ name, missing }` saying why that runtime is not here. Node is the one
 * running this file, unless it is not Node (then its own path is used only
 * when it is Node).
 */
export function runtime(name) {
  if (name === 'node') {
    const node = process.versions.bun || process.versions.deno ? 'node' : process.execPath;
    return { name, command: node, args: (script) => [script] };
  }
  const key = `${process.platform}-${process.arch}`;
  const parts = binaries[name]?.[key];
  if (!parts) return { name, missing: `no ${name} binary package for ${key}` };
  const args = (script) => (name === 'deno' ? [...denoFlags, script] : [script]);
  const file = path.join(repoRoot, 'node_modules', ...parts);
  if (fs.existsSync(file)) return { name, command: file, args };
  // `npm ci` with install scripts: bun's postinstall moves the binary into
  // its wrapper package, in place of the stub.
  const moved = movedBy[name] && path.join(repoRoot, 'node_modules', ...movedBy[name]);
  if (moved && isElf(moved)) return { name, command: moved, args };
  return { name, missing: `${file} is missing (npm ci installs ${parts[0]} with the ${name} devDependency)` };
}

/** Where a wrapper's install script puts the platform binary instead. */
const movedBy = { bun: ['bun', 'bin', 'bun.exe'] };

/** Whether `file` is an executable of this platform (not the wrapper's stub script). */
function isElf(file) {
  try {
    const fd = fs.openSync(file, 'r');
    try {
      const head = Buffer.alloc(4);
      return fs.readSync(fd, head, 0, 4, 0) === 4 && head.toString('latin1') === '\x7fELF';
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return false;
  }
}

/** Which runtime this process is. */
export function current() {
  if (process.versions.bun) return 'bun';
  if (process.versions.deno || typeof globalThis.Deno !== 'undefined') return 'deno';
  return 'node';
}

/** The command and arguments that start `script` under the runtime running now (a harness child of a scenario). */
export function self(script) {
  const name = current();
  return { command: process.execPath, args: name === 'deno' ? [...denoFlags, script] : [script] };
}
