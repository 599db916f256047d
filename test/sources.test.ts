// One list of native sources, and the layering the folders promise
// (native/README.md). CMakeLists.txt globs native/binding.cc and
// native/{binding,compat,kernel,ladder,loop}/*.cc, and binding.gyp must name the same files,
// or the node-gyp build (what users and prebuilds get) and the cmake build
// (what the unit tests check) drift apart.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '..');

interface GypTarget {
  target_name: string;
  type?: string;
  sources?: string[];
}

// A .gyp file is a Python literal; without comments it is also a JavaScript one.
function readGyp(): { targets: GypTarget[] } {
  const text = fs
    .readFileSync(path.join(root, 'binding.gyp'), 'utf8')
    .split('\n')
    .filter((line) => !/^\s*#/.test(line))
    .join('\n');
  return new Function(`return (${text});`)() as { targets: GypTarget[] };
}

function files(dir: string, ext: RegExp): string[] {
  const abs = path.join(root, dir);
  if (!fs.existsSync(abs)) return [];
  return fs
    .readdirSync(abs)
    .filter((f) => ext.test(f))
    .map((f) => `${dir}/${f}`)
    .sort();
}

// The addon's layers; helper/ is the helper executable's.
const addonDirs = ['native/binding', 'native/compat', 'native/kernel', 'native/ladder', 'native/loop'];

// The N-API layer: the addon's entry and the folder of its parts.
const isBinding = (file: string): boolean => file === 'native/binding.cc' || file.startsWith('native/binding/');

// Every native source and header, the N-API layer's included.
const allNative = (): string[] => [...[...addonDirs, 'native/helper'].flatMap((d) => files(d, /\.(cc|h)$/)), 'native/binding.cc'];

function includes(file: string): string[] {
  return fs
    .readFileSync(path.join(root, file), 'utf8')
    .split('\n')
    .map((line) => /^\s*#\s*include\s*([<"][^>"]+[>"])/.exec(line)?.[1])
    .filter((inc): inc is string => inc !== undefined);
}

describe('native sources', () => {
  const gyp = readGyp();
  const addon = gyp.targets.find((t) => t.target_name === 'proctree');

  it('binding.gyp builds the addon from exactly native/binding.cc and native/{binding,compat,kernel,ladder,loop}/*.cc', () => {
    expect(addon, 'binding.gyp has no "proctree" target').toBeDefined();
    const expected = ['native/binding.cc', ...addonDirs.flatMap((d) => files(d, /\.cc$/))].sort();
    expect([...(addon?.sources ?? [])].sort()).toEqual(expected);
  });

  it('CMakeLists.txt takes the addon sources from the same globs', () => {
    const cmake = fs.readFileSync(path.join(root, 'CMakeLists.txt'), 'utf8');
    expect(cmake).toMatch(/file\(GLOB PROCTREE_PURE_SOURCES CONFIGURE_DEPENDS "\$\{_native\}\/kernel\/\*\.cc" "\$\{_native\}\/ladder\/\*\.cc"\)/);
    expect(cmake).toMatch(/file\(GLOB PROCTREE_LOOP_SOURCES CONFIGURE_DEPENDS "\$\{_native\}\/loop\/\*\.cc"\)/);
    expect(cmake).toMatch(/file\(GLOB PROCTREE_COMPAT_SOURCES CONFIGURE_DEPENDS "\$\{_native\}\/compat\/\*\.cc"\)/);
    expect(cmake).toMatch(/file\(GLOB PROCTREE_BINDING_SOURCES CONFIGURE_DEPENDS "\$\{_native\}\/binding\/\*\.cc"\)/);
    expect(cmake).toMatch(
      /set\(PROCTREE_SOURCES "\$\{_native\}\/binding\.cc" \$\{PROCTREE_BINDING_SOURCES\} \$\{PROCTREE_COMPAT_SOURCES\} \$\{PROCTREE_PURE_SOURCES\} \$\{PROCTREE_LOOP_SOURCES\}\)/,
    );
    expect(cmake).toMatch(/add_library\(proctree SHARED \$\{PROCTREE_SOURCES\}/);
  });

  it('the helper target is native/helper/*.cc plus kernel files that exist', () => {
    const helper = gyp.targets.find((t) => t.target_name === 'proctree-helper');
    expect(helper, 'binding.gyp has no "proctree-helper" target').toBeDefined();
    const named = helper?.sources ?? [];
    for (const src of named) expect(fs.existsSync(path.join(root, src)), `${src} is missing`).toBe(true);
    for (const src of files('native/helper', /\.cc$/)) expect(named, `${src} is not in the helper`).toContain(src);
    for (const src of named) expect(src, `${src}: the helper takes helper/ and kernel/ only`).toMatch(/^native\/(helper|kernel)\//);
  });

  it('no libuv call anywhere in native/ (Bun and Deno have Node-API, not libuv); Node\'s is looked up by name, in one file', () => {
    const lookups: string[] = [];
    for (const file of allNative()) {
      let code = fs
        .readFileSync(path.join(root, file), 'utf8')
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/\/\/.*$/gm, '');
      if (/"(uv_|napi_get_uv_event_loop)/.test(code)) lookups.push(file);
      // Under Node only, binding/host_loop.cc finds libuv at run time (dlsym).
      if (file === 'native/binding/host_loop.cc') code = code.replace(/"[^"\n]*"/g, '""');
      expect(code, `${file} calls libuv`).not.toMatch(/\buv_[a-z_]+\s*\(|napi_get_uv_event_loop|\buv_[a-z]+_t\b/);
    }
    expect(lookups).toEqual(['native/binding/host_loop.cc']);
  });

  it('the built addon and helper need no libuv symbol', () => {
    for (const name of ['proctree.node', 'proctree-helper']) {
      const file = path.join(root, 'build', 'Release', name);
      if (!fs.existsSync(file)) continue;
      const syms = execFileSync('readelf', ['--dyn-syms', '-W', file], { encoding: 'utf8' })
        .split('\n')
        .filter((line) => /\bUND\b/.test(line))
        .map((line) => line.trim().split(/\s+/)[7] ?? '');
      expect(syms.filter((sym) => /^uv_|^napi_get_uv_event_loop/.test(sym)), name).toEqual([]);
    }
  });

  it('no native file outside the layer folders', () => {
    const top = fs.readdirSync(path.join(root, 'native')).filter((f) => /\.(cc|h)$/.test(f));
    expect(top).toEqual(['binding.cc']);
    const folders = fs
      .readdirSync(path.join(root, 'native'), { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name)
      .sort();
    expect(folders).toEqual(['binding', 'compat', 'helper', 'kernel', 'ladder', 'loop']);
  });

  it('the folder tells the layer: N-API only in binding.cc and binding/, libuv nowhere', () => {
    const all = allNative();
    expect(all.filter(isBinding).length, 'the N-API layer has more than its entry').toBeGreaterThan(1);
    for (const file of all) {
      const inc = includes(file);
      const napi = inc.some((i) => /^<(napi|node_api)\.h>$/.test(i));
      const uv = inc.some((i) => i === '<uv.h>');
      // Each file of the N-API layer says so by its own include.
      expect(napi, `${file} includes N-API`).toBe(isBinding(file));
      // The addon runs its own loop (loop/waiter.h, or Node's found at run
      // time): Bun and Deno have Node-API, not libuv.
      expect(uv, `${file} includes uv.h`).toBe(false);
      const local = inc.filter((i) => i.startsWith('"')).map((i) => i.slice(1, -1));
      // Nothing outside the N-API layer reaches into it.
      if (!isBinding(file)) {
        for (const i of local) expect(i, `${file} includes ${i}`).not.toMatch(/^binding\//);
      }
      // Lower layers never reach up: kernel/ sees only kernel/ (and the
      // helper's protocol), ladder/ only kernel/ and ladder/.
      if (file.startsWith('native/kernel/')) {
        for (const i of local) expect(i, `${file} includes ${i}`).toMatch(/^(kernel\/|helper\/shim_protocol\.h$)/);
      }
      // compat/ stands alone: library symbols, nothing of ours.
      if (file.startsWith('native/compat/')) expect(local, `${file} includes ${local.join(', ')}`).toEqual([]);
      if (file.startsWith('native/ladder/')) {
        for (const i of local) expect(i, `${file} includes ${i}`).toMatch(/^(kernel|ladder)\//);
      }
      if (file.startsWith('native/helper/')) {
        for (const i of local) expect(i, `${file} includes ${i}`).toMatch(/^(kernel|helper)\//);
      }
    }
  });
});
