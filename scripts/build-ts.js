#!/usr/bin/env node
// Compiles lib/ to dist/cjs with tsc and writes the ESM entry, which re-exports
// the CommonJS build by name (one implementation, two module systems).
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const tsc = require.resolve('typescript/bin/tsc');
// A file moved or removed in lib/ must not live on in dist/ (a stale
// dist/cjs/options.js would shadow dist/cjs/options/index.js).
fs.rmSync(path.join(root, 'dist', 'cjs'), { recursive: true, force: true });
execFileSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.json')], { stdio: 'inherit' });
require('./build-protocol.js').buildProtocolValidators(root);

// The names come from the source, not from loading the build (which needs the
// native binary, absent when cross-compiling).
const index = fs.readFileSync(path.join(root, 'lib', 'index.ts'), 'utf8');
const names = [];
for (const m of index.matchAll(/export\s*\{([^}]*)\}/g)) {
  for (const part of m[1].split(',')) {
    const name = part.trim();
    if (name && !name.startsWith('type ')) names.push(name.split(/\s+as\s+/).pop());
  }
}
const esmDir = path.join(root, 'dist', 'esm');
fs.mkdirSync(esmDir, { recursive: true });
fs.writeFileSync(
  path.join(esmDir, 'index.mjs'),
  `import cjs from '../cjs/index.js';\nexport const { ${names.join(', ')} } = cjs;\nexport default cjs;\n`,
);
fs.writeFileSync(path.join(esmDir, 'index.d.mts'), `export * from '../cjs/index.js';\nexport { default } from '../cjs/index.js';\n`);
