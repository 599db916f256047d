#!/usr/bin/env node
// The oldest userland a prebuilt file may need: Node's own official builds
// run on glibc 2.28 with the libstdc++ of GCC 5 (GLIBCXX_3.4.21,
// CXXABI_1.3.9), so a prebuild that needs more fails to load exactly where
// Node itself runs (Debian 11, Ubuntu 20.04, RHEL 8) and npm falls back to a
// compiler that a slim image does not have. Used by scripts/prebuild.js (the
// build fails) and by test/pack.test.ts (every file in the tarball).
//
//   node scripts/symbol-ceiling.js <file>...     prints each file's needs; exit 1 above the ceiling
//
// Read with readelf (binutils), which reads ELF files of any architecture.
'use strict';
const { execFileSync } = require('node:child_process');

/** The newest version of each versioned library a prebuilt file may require. */
const CEILING = Object.freeze({ GLIBC: '2.28', GLIBCXX: '3.4.21', CXXABI: '1.3.9', GCC: '7.0.0' });

function compareVersions(a, b) {
  const x = a.split('.').map(Number);
  const y = b.split('.').map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

function readelf(args, file) {
  return execFileSync('readelf', [...args, '-W', file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Whether `version` (e.g. `GLIBC_2.34`) is above the ceiling; unknown families are. */
function aboveCeiling(version) {
  const m = /^([A-Z]+)_(\d+(?:\.\d+)*)$/.exec(version);
  if (!m) return true;
  const max = CEILING[m[1]];
  return max === undefined || compareVersions(m[2], max) > 0;
}

/**
 * What `file` needs from the system: `{ file, static, needs, tooNew }`, where
 * `needs` lists every required symbol version (`GLIBC_2.17`, …), `static` is
 * true for an executable with no program interpreter and no shared library,
 * and `tooNew` lists each version above the ceiling with the symbols that
 * require it.
 */
function symbolNeeds(file) {
  const needs = [];
  for (const line of readelf(['-V'], file).split('\n')) {
    const m = /^\s+0x[0-9a-f]+:\s+Name:\s+(\S+)\s+Flags:/.exec(line);
    if (m) needs.push(m[1]);
  }
  const headers = readelf(['-l', '-d'], file);
  const isStatic = !/\bINTERP\b/.test(headers) && !/\(NEEDED\)/.test(headers);
  const bySymbol = new Map();
  for (const line of readelf(['--dyn-syms'], file).split('\n')) {
    const m = /\s(\S+)@([A-Z]+_[\d.]+)(?:\s|$)/.exec(line);
    if (m && /\bUND\b/.test(line)) {
      const list = bySymbol.get(m[2]) ?? [];
      list.push(m[1]);
      bySymbol.set(m[2], list);
    }
  }
  const tooNew = [...new Set(needs)]
    .filter(aboveCeiling)
    .sort()
    .map((version) => ({ version, symbols: bySymbol.get(version) ?? [] }));
  return { file, static: isStatic, needs: [...new Set(needs)].sort(), tooNew };
}

/** Throws an Error naming every file, version and symbol above the ceiling. */
function assertSymbolCeiling(files) {
  const bad = files.map(symbolNeeds).filter((r) => r.tooNew.length > 0);
  if (bad.length === 0) return;
  const lines = bad.flatMap((r) =>
    r.tooNew.map((t) => `  ${r.file}: ${t.version} (${t.symbols.join(', ') || 'no symbol named'})`),
  );
  const ceiling = Object.entries(CEILING)
    .map(([k, v]) => `${k}_${v}`)
    .join(', ');
  throw new Error(`prebuilt files need symbol versions above ${ceiling}:\n${lines.join('\n')}`);
}

module.exports = { CEILING, symbolNeeds, assertSymbolCeiling, aboveCeiling };

if (require.main === module) {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error('usage: symbol-ceiling.js <file>...');
    process.exit(2);
  }
  for (const f of files) {
    const r = symbolNeeds(f);
    console.log(`${f}: ${r.static ? 'static' : r.needs.join(' ')}`);
  }
  try {
    assertSymbolCeiling(files);
  } catch (err) {
    console.error(err.message);
    process.exit(1);
  }
}
