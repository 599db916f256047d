// One list of native sources: CMakeLists.txt globs native/*.cc, and
// binding.gyp must name the same files, or the node-gyp build (what users and
// prebuilds get) and the cmake build (what the unit tests check) drift apart.
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

function ccFiles(dir: string): string[] {
  return fs
    .readdirSync(path.join(root, dir))
    .filter((f) => f.endsWith('.cc'))
    .map((f) => `${dir}/${f}`)
    .sort();
}

describe('native sources', () => {
  const gyp = readGyp();
  const addon = gyp.targets.find((t) => t.target_name === 'proctree');

  it('binding.gyp builds the addon from exactly native/*.cc', () => {
    expect(addon, 'binding.gyp has no "proctree" target').toBeDefined();
    expect([...(addon?.sources ?? [])].sort()).toEqual(ccFiles('native'));
  });

  it('CMakeLists.txt takes the addon sources from the same glob', () => {
    const cmake = fs.readFileSync(path.join(root, 'CMakeLists.txt'), 'utf8');
    expect(cmake).toMatch(/file\(GLOB PROCTREE_SOURCES CONFIGURE_DEPENDS "\$\{CMAKE_CURRENT_SOURCE_DIR\}\/native\/\*\.cc"\)/);
    expect(cmake).toMatch(/add_library\(proctree SHARED \$\{PROCTREE_SOURCES\}/);
  });

  it('every other binding.gyp target names files that exist, and covers native/*/ sources', () => {
    const others = gyp.targets.filter((t) => t !== addon);
    const named = new Set(others.flatMap((t) => t.sources ?? []));
    for (const src of named) expect(fs.existsSync(path.join(root, src)), `${src} is missing`).toBe(true);
    const subdirs = fs
      .readdirSync(path.join(root, 'native'), { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => `native/${e.name}`);
    for (const dir of subdirs) {
      for (const src of ccFiles(dir)) expect(named.has(src), `${src} is in no binding.gyp target`).toBe(true);
    }
  });
});
