#!/usr/bin/env node
// Run before the tests: builds the addon when it is missing or older than its
// sources, and the TypeScript facade, so `npm test` works straight after a clone.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const addon = path.join(root, 'build', 'Release', 'proctree.node');
const mtime = (p) => (fs.existsSync(p) ? fs.statSync(p).mtimeMs : 0);
// native/ has one folder per layer: look inside them too.
const newest = (dir) =>
  Math.max(
    0,
    ...fs.readdirSync(dir, { withFileTypes: true }).map((e) => {
      const p = path.join(dir, e.name);
      return e.isDirectory() ? newest(p) : mtime(p);
    }),
  );

if (mtime(addon) < Math.max(newest(path.join(root, 'native')), mtime(path.join(root, 'binding.gyp')))) {
  const gyp = require.resolve('node-gyp/bin/node-gyp.js');
  execFileSync(process.execPath, [gyp, 'rebuild'], { cwd: root, stdio: 'inherit' });
}
execFileSync(process.execPath, [path.join(__dirname, 'build-ts.js')], { cwd: root, stdio: 'inherit' });
