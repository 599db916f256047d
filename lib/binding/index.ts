// The loader: the one place that picks the binding a process runs. On
// Linux the addon (build/Release or prebuilds/, through node-gyp-build, or
// embedded in a Bun single-file executable); off Linux, or with
// PROCTREE_PORTABLE set, the portable binding (portable.ts), the same
// contract (contract.ts) in TypeScript on node:child_process, and no addon
// is loaded.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { NativeBinding, PortableMode } from './contract';
import { createPortableBinding } from './portable';

/**
 * PROCTREE_PORTABLE forces the portable binding on Linux (any value but ''
 * and '0'; 'ps' also makes it read the process table with ps(1), as on
 * macOS): how the portable tier is tested here. Off Linux it is the only
 * binding. On Linux without the variable, an addon that does not load is an
 * error, as it always was (`proctree doctor` reports it): the portable tier
 * is far weaker, and falling back to it silently would hide that.
 */
function portableMode(): PortableMode | null {
  const forced = process.env.PROCTREE_PORTABLE;
  const reason =
    process.platform !== 'linux'
      ? `not on Linux (${process.platform})`
      : forced !== undefined && forced !== '' && forced !== '0'
        ? `PROCTREE_PORTABLE=${forced}`
        : null;
  if (reason === null) return null;
  const processTable =
    process.platform === 'win32' ? 'windows' : process.platform === 'linux' && forced !== 'ps' ? 'proc' : 'ps';
  return { reason, processTable };
}

export const packageRoot = path.resolve(__dirname, '..', '..', '..');
/** Set when the portable binding runs the calls (no addon loaded); null with the addon. */
export const portable: PortableMode | null = portableMode();

/** Bun's embedded files (`bun build --compile`): where they are read, and each one's name. */
interface BunRuntime {
  main?: unknown;
  embeddedFiles?: ReadonlyArray<{ name?: string }>;
}

/**
 * Inside a single-file executable of Bun (`bun build --compile`), whose
 * modules live in Bun's embedded file system (`/$bunfs/root/…`): there,
 * node-gyp-build finds no addon, and no helper can be executed from it.
 */
function bunExecutable(): BunRuntime | null {
  const bun = (globalThis as { Bun?: BunRuntime }).Bun;
  return typeof bun?.main === 'string' && bun.main.startsWith('/$bunfs/') ? bun : null;
}

/**
 * The addon in a Bun single-file executable: `bun build --compile` embeds a
 * .node file that is require()d by a literal path (each of these that exists
 * when the executable is built) and extracts it when it is required. Tried in
 * node-gyp-build's order; a prebuild of the other architecture fails to load
 * and the next is tried.
 */
function loadEmbeddedAddon(): { binding: NativeBinding; file: string } {
  // Each literal require directly in a try block: Bun's bundler leaves one
  // whose file does not exist to fail at run time instead of failing the build.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const failed: string[] = [];
  try {
    return { binding: require('../../../build/Release/proctree.node') as NativeBinding, file: path.join(packageRoot, 'build/Release/proctree.node') };
  } catch (err) {
    failed.push(`build/Release: ${(err as Error).message}`);
  }
  try {
    const binding = require('../../../prebuilds/linux-x64/proctree.glibc.node') as NativeBinding;
    return { binding, file: path.join(packageRoot, 'prebuilds/linux-x64/proctree.glibc.node') };
  } catch (err) {
    failed.push(`prebuilds/linux-x64: ${(err as Error).message}`);
  }
  try {
    const binding = require('../../../prebuilds/linux-arm64/proctree.glibc.node') as NativeBinding;
    return { binding, file: path.join(packageRoot, 'prebuilds/linux-arm64/proctree.glibc.node') };
  } catch (err) {
    failed.push(`prebuilds/linux-arm64: ${(err as Error).message}`);
  }
  /* eslint-enable @typescript-eslint/no-require-imports */
  throw new Error(`no proctree addon embedded in this executable loads here (${failed.join('; ')})`);
}

function loadAddon(): { binding: NativeBinding; file: string } {
  if (bunExecutable()) return loadEmbeddedAddon();
  // node-gyp-build looks in build/Release first, then prebuilds/<platform>-<arch>.
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const load = require('node-gyp-build') as ((dir: string) => NativeBinding) & { path(dir: string): string };
  return { file: load.path(packageRoot), binding: load(packageRoot) };
}

/**
 * In a Bun single-file executable: the proctree-helper embedded in it (built
 * with the helper as one more entry point, or imported `with { type: 'file' }`),
 * copied out to a file the kernel can execute. Once per content, to
 * `<tmpdir>/proctree-<uid>/<sha256 prefix>/proctree-helper`, when that
 * directory is this user's and no one else can write it; else (someone
 * else's, writable by others, a read-only or full tmpdir) to a private
 * mkdtemp directory of this process, removed at its exit (the guardian and
 * the shims have exec'd it by then). null when no helper is embedded, or it
 * cannot be copied out at all (the helper probe then says why calls run
 * without a guardian), or outside such an executable.
 */
export function embeddedHelper(): string | null {
  const bun = bunExecutable();
  const entry = bun?.embeddedFiles?.find((f) => /^proctree-helper(-[0-9a-z]+)?\.?$/.test(path.basename(f.name ?? '')));
  if (!bun || !entry?.name) return null;
  const bytes = fs.readFileSync(path.join(path.dirname(bun.main as string), path.basename(entry.name)));
  const uid = process.getuid?.() ?? 0;
  try {
    const top = path.join(os.tmpdir(), `proctree-${uid}`);
    fs.mkdirSync(top, { mode: 0o700, recursive: true });
    const st = fs.lstatSync(top);
    if (!st.isDirectory() || st.uid !== uid || (st.mode & 0o022) !== 0) throw new Error(`${top} is not only uid ${uid}'s`);
    const dir = path.join(top, createHash('sha256').update(bytes).digest('hex').slice(0, 16));
    const file = path.join(dir, 'proctree-helper');
    if (fs.existsSync(file) && fs.readFileSync(file).equals(bytes)) return file;
    fs.mkdirSync(dir, { mode: 0o700, recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, bytes, { mode: 0o755 });
    fs.renameSync(tmp, file);
    return file;
  } catch {
    // not a directory to share: a private one
  }
  try {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-helper-'));
    process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'proctree-helper');
    fs.writeFileSync(file, bytes, { mode: 0o755 });
    return file;
  } catch {
    return null;
  }
}

const loaded = portable ? { binding: createPortableBinding(portable), file: '' } : loadAddon();
/** The .node file that was loaded ('' with the portable binding); helper executables ship next to it. */
export const nativePath: string = loaded.file;
/** The binding this process runs: the addon, or the portable one. */
export const binding: NativeBinding = loaded.binding;
