#!/usr/bin/env node
// The child side of spawn (native/kernel/child.cc) runs between a CLONE_VM
// clone and the exec, on the harness's memory, while the parent thread is
// suspended. A call through the PLT there would, the first time, run the
// dynamic linker's lazy binding (locks, TLS, errno) in that child; a libc
// call could take a lock another harness thread holds. So the code reachable
// from child_main may reference no symbol outside its own object file: no
// R_X86_64_PLT32 / R_AARCH64_CALL26 call to libc (a loop the compiler turned
// into memset or strlen, a sanitizer hook, __stack_chk_fail), no GOT load of
// one (-fno-plt), no TLS access (errno).
//
// Nor may it read the thread pointer at all, relocation or not: the stack
// protector's canary is loaded from %fs:0x28 (x86-64), other TLS through
// %fs:/%gs: or `mrs xN, tpidr_el0` (arm64). That TLS is the spawning
// thread's: the child runs on it while that thread waits in the vfork, and
// must not depend on what it holds (a fault in a CLONE_VM child before
// Linux 5.16 takes every process sharing the memory with it). Every
// instruction of the functions reached is checked for such an operand.
//
// Usage: node child-side-calls.mjs [--objdump PATH] [--find NAME] [--root REGEX] FILE...
//   FILE is an object file, or a linked one that still has its symbols (an
//   unstripped addon: its calls into the PLT and its TLS reads are what can
//   be seen there);
//   FILE may be a ;-separated list (CMake's $<TARGET_OBJECTS:...>); --find
//   picks the one whose name is NAME. Roots: the functions whose (mangled)
//   name matches REGEX (default child_main); every function of the file they
//   call, directly or by a tail jump, is checked too.
// Exit status: 0 clean, 1 a violation (listed), 2 usage or tool error.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import process from 'node:process';

function fail(msg) {
  console.error(`child-side-calls: ${msg}`);
  process.exit(2);
}

function parseArgs(argv) {
  const out = { objdump: 'objdump', find: null, root: 'child_main', files: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--objdump' || a === '--find' || a === '--root') {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      out[a.slice(2)] = argv[++i];
    } else {
      out.files.push(...a.split(';').filter(Boolean));
    }
  }
  return out;
}

function run(tool, args) {
  try {
    return execFileSync(tool, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  } catch (e) {
    fail(`${tool} ${args.join(' ')}: ${e.message}`);
  }
}

// objdump -t: every symbol with its section ("*UND*" when undefined).
function symbols(objdump, file) {
  const defined = new Map(); // name -> { section, value, isFunction }
  const undefinedNames = new Set();
  for (const line of run(objdump, ['-t', file]).split('\n')) {
    // value, 7 flag characters, section, size, name
    const m = /^([0-9a-f]+) (.{7}) (\S+)\t([0-9a-f]+) +(.*)$/.exec(line);
    if (!m) continue;
    const [, value, flags, section, , rawName] = m;
    const name = rawName.replace(/^\.hidden /, '').trim();
    if (section === '*UND*') undefinedNames.add(name);
    else defined.set(name, { section, value: parseInt(value, 16), isFunction: flags.includes('F') });
  }
  return { defined, undefinedNames };
}

// objdump -dr: each function's instructions and the relocations in it.
function disassemble(objdump, file) {
  const functions = new Map(); // name -> { section, start, calls: Set<name>, relocs: [] }
  let section = null;
  let current = null;
  for (const line of run(objdump, ['-dr', '--no-show-raw-insn', file]).split('\n')) {
    const sec = /^Disassembly of section (\S+):$/.exec(line);
    if (sec) {
      section = sec[1];
      current = null;
      continue;
    }
    const head = /^([0-9a-f]+) <(.+)>:$/.exec(line);
    if (head) {
      current = { name: head[2], section, start: parseInt(head[1], 16), calls: new Set(), relocs: [], tls: [] };
      functions.set(current.name, current);
      continue;
    }
    if (!current) continue;
    // An instruction that reads the thread pointer (TLS).
    const insnText = /^\s*([0-9a-f]+):\s+(.*)$/.exec(line);
    if (insnText && THREAD_POINTER.test(insnText[2])) {
      current.tls.push(`${insnText[2].replace(/\s+/g, ' ').trim()} at ${insnText[1]}`);
    }
    // A relocation: on its own line, or after the instruction (objdump -w).
    const reloc = /\b([0-9a-f]+): (R_[A-Z0-9_]+)\s+(\S+)/.exec(line);
    if (reloc) {
      const target = /^(.*?)(?:([+-])0x([0-9a-f]+))?$/.exec(reloc[3]);
      const addend = target[3] ? (target[2] === '-' ? -1 : 1) * parseInt(target[3], 16) : 0;
      current.relocs.push({ offset: reloc[1], type: reloc[2], symbol: target[1], addend, text: line.trim() });
    }
    // A direct call or jump the assembler resolved in the same section:
    // "call 1f0 <_ZN...>", "bl 40 <fn>", "jmp 80 <fn>" (a tail call).
    const insn = /^\s*[0-9a-f]+:\s+(call|callq|jmp|jmpq|bl|b)\s+[0-9a-f]+ <([^>+]+)>/.exec(line);
    if (insn && insn[2] !== current.name) current.calls.add(insn[2]);
  }
  return functions;
}

// x86-64: a %fs: or %gs: segment operand; arm64: the thread ID registers.
const THREAD_POINTER = /%[fg]s:|\b(mrs|msr)\b.*\btpidr(ro)?_el[0-3]\b/i;

// Data the child side may read from outside the file: the stack protector's
// canary, which aarch64's glibc keeps in a global read through the GOT (its
// entry is filled when the library is loaded, never lazily; x86-64 reads the
// canary from %fs:0x28, with no relocation). A call (__stack_chk_fail) is
// never allowed.
const HARMLESS_DATA = new Set(['__stack_chk_guard']);

const CALL_RELOCS = new Set([
  'R_X86_64_PLT32',
  'R_X86_64_PC32',
  'R_AARCH64_CALL26',
  'R_AARCH64_JUMP26',
]);

function main() {
  const args = parseArgs(process.argv.slice(2));
  let files = args.files;
  if (args.find) files = files.filter((f) => path.basename(f) === args.find);
  if (files.length !== 1) fail(`expected one object file${args.find ? ` named ${args.find}` : ''}, got ${files.length}`);
  const file = files[0];
  const { defined, undefinedNames } = symbols(args.objdump, file);
  const functions = disassemble(args.objdump, file);
  const rootRe = new RegExp(args.root);
  const roots = [...functions.keys()].filter((n) => rootRe.test(n));
  if (roots.length === 0) {
    console.log(`child-side-calls: no function matching /${args.root}/ in ${file}`);
    process.exit(1);
  }

  // A call through a section symbol (".text+0x40", how the assembler writes
  // a call to a local function in another section) names the function that
  // starts there; x86's PC-relative addend counts from the next instruction.
  function functionAt(sectionName, addend, type) {
    const at = addend + (type.startsWith('R_X86_64_') ? 4 : 0);
    for (const f of functions.values()) if (f.section === sectionName && f.start === at) return f.name;
    return null;
  }

  const seen = new Set();
  const queue = [...roots];
  const violations = [];
  const allowed = new Set();
  while (queue.length > 0) {
    const name = queue.shift();
    if (seen.has(name)) continue;
    seen.add(name);
    // A linked file (the addon itself): a call into its PLT.
    if (/@plt$/.test(name)) {
      violations.push(`${name.replace(/@plt$/, '')}: called through the PLT from the child side`);
      continue;
    }
    const fn = functions.get(name);
    if (!fn) {
      violations.push(`${name}: called from the child side but not in this file`);
      continue;
    }
    for (const callee of fn.calls) if (functions.has(callee)) queue.push(callee);
    for (const t of fn.tls) violations.push(`${name} reads the thread pointer (TLS): ${t}`);
    for (const r of fn.relocs) {
      if (undefinedNames.has(r.symbol) || (!defined.has(r.symbol) && !r.symbol.startsWith('.'))) {
        if (HARMLESS_DATA.has(r.symbol) && !CALL_RELOCS.has(r.type)) {
          allowed.add(r.symbol);
          continue;
        }
        const how = CALL_RELOCS.has(r.type) ? 'calls through the PLT' : 'references';
        violations.push(`${name} ${how} ${r.symbol} (${r.type} at ${r.offset})`);
        continue;
      }
      if (!CALL_RELOCS.has(r.type)) continue;
      const sym = defined.get(r.symbol);
      if (sym && sym.isFunction) {
        queue.push(r.symbol);
      } else if (r.symbol.startsWith('.')) {
        const target = functionAt(r.symbol, r.addend, r.type);
        if (target) queue.push(target);
      }
    }
  }

  console.log(`child-side-calls: ${path.basename(file)}: checked ${[...seen].join(', ')}`);
  if (allowed.size > 0) console.log(`child-side-calls: reads ${[...allowed].join(', ')} (allowed: data, not a call)`);
  if (violations.length > 0) {
    console.log('The child side of spawn references symbols outside its object file or reads TLS:');
    for (const v of violations) console.log(`  ${v}`);
    process.exit(1);
  }
  console.log('child-side-calls: no call or reference outside the file, no TLS');
}

main();
