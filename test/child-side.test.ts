// The child side of spawn (native/kernel/child.cc) runs between a CLONE_VM
// clone and the exec, on the harness's memory: it may call nothing through
// the PLT (a lazy binding would run the dynamic linker there; a libc call
// could wait on a lock another thread of the harness holds), and may read
// no TLS (the stack protector's canary included): the thread pointer is the
// spawning thread's, whose TLS may be gone by then. This checks the
// object files node-gyp built (what users and prebuilds get: the addon's and
// the helper's) with test/native/child-side-calls.mjs, which ctest also runs
// on the cmake build's object; and shows the check fails when it should.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '..');
const checker = path.join(root, 'test', 'native', 'child-side-calls.mjs');
const objRoot = path.join(root, 'build', 'Release', 'obj.target');

function check(object: string, objdump = 'objdump'): { status: number | null; output: string } {
  const r = spawnSync(process.execPath, [checker, '--objdump', objdump, object], { encoding: 'utf8' });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

function have(tool: string): boolean {
  return spawnSync(tool, ['--version']).status === 0;
}

// node-gyp's objects of child.cc: build/Release/obj.target/<target>/native/kernel/child.o
function builtObjects(): string[] {
  if (!fs.existsSync(objRoot)) return [];
  return fs
    .readdirSync(objRoot)
    .map((target) => path.join(objRoot, target, 'native', 'kernel', 'child.o'))
    .filter((p) => fs.existsSync(p));
}

// The flags binding.gyp compiles child.cc with (Release adds -O3).
const cxxFlags = [
  '-std=c++17',
  '-O3',
  '-fPIC',
  '-fno-exceptions',
  '-fvisibility=hidden',
  '-fstack-protector-strong',
  '-fno-tree-loop-distribute-patterns',
  '-I',
  path.join(root, 'native'),
];

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'proctree-child-side-'));
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }));

function compile(name: string, source: string, cxx = process.env.CXX ?? 'c++'): string {
  const src = path.join(scratch, `${name}.cc`);
  const obj = path.join(scratch, `${name}.o`);
  fs.writeFileSync(src, source);
  const r = spawnSync(cxx, [...cxxFlags, '-c', src, '-o', obj], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cxx} failed on ${name}: ${r.error?.message ?? ''}${r.stderr}`);
  return obj;
}

describe('the child side of spawn calls nothing outside child.o and reads no TLS', () => {
  it("node-gyp's child.o, in the addon and in the helper", () => {
    const objects = builtObjects();
    expect(
      objects.map((o) => path.relative(objRoot, o)),
      'no node-gyp object of child.cc: npm run build:native',
    ).toContain(path.join('proctree', 'native', 'kernel', 'child.o'));
    for (const object of objects) {
      const r = check(object);
      expect(r.output, object).toContain('child_main');
      expect(r.status, r.output).toBe(0);
    }
  });

  // The linked addon node-gyp made (unstripped; prebuilds are stripped, so
  // their child side is checked as child.cc cross-compiled, below).
  const linked = path.join(root, 'build', 'Release', 'proctree.node');
  it.skipIf(!fs.existsSync(linked))("node-gyp's linked proctree.node", () => {
    const r = check(linked);
    expect(r.output).toContain('child_main');
    expect(r.status, r.output).toBe(0);
  });

  // The check must be able to fail: child.cc itself with one libc call added
  // at the top of child_main, built with binding.gyp's flags.
  const childSource = fs.readFileSync(path.join(root, 'native', 'kernel', 'child.cc'), 'utf8');
  const entry = /(int child_main\(void\* arg\) \{\n\s*ChildArgs\* a = static_cast<ChildArgs\*>\(arg\);\n)/;
  const withStrlen = `#include <cstring>\n${childSource.replace(entry, '$1  a->report->err = static_cast<int>(strlen(a->cwd));\n')}`;

  it('fails on a copy of child.cc that calls strlen', () => {
    expect(childSource, "child_main's first line, where the call is added, moved").toMatch(entry);
    const r = check(compile('child-with-strlen', withStrlen));
    expect(r.status, r.output).toBe(1);
    expect(r.output).toMatch(/child_main\S* calls through the PLT strlen \(R_X86_64_PLT32/);
  });

  // The arm64 prebuild is cross-compiled: its child side, built the same
  // way, calls nothing outside the file either (and the check sees a CALL26
  // when it does). CI has the cross compiler (PROCTREE_REQUIRE_ARM64=1).
  const crossCxx = 'aarch64-linux-gnu-g++';
  const crossObjdump = 'aarch64-linux-gnu-objdump';
  const noCross = have(crossCxx) && have(crossObjdump) ? null : `${crossCxx} or ${crossObjdump} is missing`;
  it.skipIf(noCross !== null && process.env.PROCTREE_REQUIRE_ARM64 !== '1')('arm64: the same, cross-compiled', () => {
    if (noCross) throw new Error(`PROCTREE_REQUIRE_ARM64=1, but ${noCross}`);
    const good = check(compile('child-arm64', childSource, crossCxx), crossObjdump);
    expect(good.output).toContain('child_main');
    expect(good.status, good.output).toBe(0);
    const bad = check(compile('child-arm64-with-strlen', withStrlen, crossCxx), crossObjdump);
    expect(bad.status, bad.output).toBe(1);
    expect(bad.output).toMatch(/child_main\S* calls through the PLT strlen \(R_AARCH64_(CALL26|JUMP26)/);
    // arm64 reads TLS with `mrs xN, tpidr_el0`.
    const tls = check(compile('tls-read-arm64', tlsSource, crossCxx), crossObjdump);
    expect(tls.status, tls.output).toBe(1);
    expect(tls.output).toMatch(/child_main\S* reads the thread pointer \(TLS\): mrs x\d+, tpidr_el0/);
  });

  // The stack protector reads its canary from the thread pointer (x86-64:
  // %fs:0x28): child.cc as it was, without the attribute that turns it off,
  // built with binding.gyp's -fstack-protector-strong, must fail.
  const noProtector = /#define PROCTREE_NO_STACK_PROTECTOR no_stack_protector,\n/;
  const withCanary = childSource.replace(noProtector, '#define PROCTREE_NO_STACK_PROTECTOR\n');
  it('fails on a copy of child.cc built with the stack protector (a TLS read)', () => {
    expect(childSource, 'the no_stack_protector attribute of child.cc moved').toMatch(noProtector);
    const r = check(compile('child-with-canary', withCanary));
    expect(r.status, r.output).toBe(1);
    expect(r.output).toMatch(/child_main\S* reads the thread pointer \(TLS\): mov %fs:0x28/);
  });

  // Any TLS variable, read without a call (initial-exec: the thread pointer
  // plus an offset).
  const tlsSource = [
    '__thread int per_thread __attribute__((tls_model("initial-exec"))) = 1;',
    'int child_main(void* arg) { return per_thread + (arg != nullptr); }',
  ].join('\n');
  it('fails on a child side that reads a TLS variable', () => {
    const r = check(compile('tls-read', tlsSource));
    expect(r.status, r.output).toBe(1);
    expect(r.output).toMatch(/child_main\S* reads the thread pointer \(TLS\): \w+ %fs:/);
  });

  // What child_main reaches through a function of the same file counts too;
  // what it does not reach does not.
  it('follows calls into the file and nothing else', () => {
    const source = [
      '#include <cstring>',
      'namespace {',
      '__attribute__((noinline)) int measure(const char* s) { return static_cast<int>(strlen(s)); }',
      '}',
      'int child_main(void* arg) { return measure(static_cast<const char*>(arg)) + 1; }',
      'int parent_side(void* arg) { return static_cast<int>(strlen(static_cast<const char*>(arg))); }',
    ].join('\n');
    const r = check(compile('reach', source));
    expect(r.status, r.output).toBe(1);
    expect(r.output).toMatch(/measure\S* calls through the PLT strlen/);
    expect(r.output).not.toMatch(/parent_side/);
    // Without the helper's call, the same file passes: parent_side alone
    // calls strlen, and child_main does not reach it.
    const clean = check(compile('reach-clean', source.replace('strlen(s)', 's[0]')));
    expect(clean.status, clean.output).toBe(0);
  });
});
