// lib/ports.ts: the pure half of what a call listens on: the
// addon's answer normalized, the `ready` option validated, and the checks a
// ready-wait makes (listeners, output across chunk boundaries). The kernel
// half is test/native/sockets_test.cc, on real sockets.
import { describe, expect, it } from 'vitest';

import {
  formatListener,
  matchesListening,
  normalizeListeners,
  outputMatcher,
  readyReached,
  resolveReady,
} from '../dist/cjs/ports.js';
import type { NativeListener } from '../dist/cjs/binding/contract.js';
import type { Listener } from '../dist/cjs/types.js';

const native = (protocol: string, address: string, port: number, pid: number): NativeListener => ({ protocol, address, port, pid });

describe('normalizeListeners', () => {
  it('sorts tcp, udp, unix, then address, port, pid; drops exact duplicates', () => {
    const out = normalizeListeners([
      native('unix', '@app', 0, 9),
      native('udp', '127.0.0.1', 5353, 4),
      native('tcp', '::1', 3000, 7),
      native('tcp', '127.0.0.1', 3000, 8),
      native('tcp', '127.0.0.1', 3000, 7),
      native('tcp', '::1', 3000, 7),
    ]);
    expect(out).toEqual([
      { protocol: 'tcp', address: '127.0.0.1', port: 3000, pid: 7 },
      { protocol: 'tcp', address: '127.0.0.1', port: 3000, pid: 8 },
      { protocol: 'tcp', address: '::1', port: 3000, pid: 7 },
      { protocol: 'udp', address: '127.0.0.1', port: 5353, pid: 4 },
      { protocol: 'unix', address: '@app', pid: 9 },
    ]);
  });

  it('has no port for unix and no pid when the addon knows none (-1)', () => {
    const out = normalizeListeners([native('unix', '/run/a.sock', 0, -1), native('tcp', '0.0.0.0', 80, -1)]);
    expect(out).toEqual([
      { protocol: 'tcp', address: '0.0.0.0', port: 80 },
      { protocol: 'unix', address: '/run/a.sock' },
    ]);
    for (const l of out) {
      expect('pid' in l).toBe(false);
      if (l.protocol === 'unix') expect('port' in l).toBe(false);
    }
  });

  it('drops an unknown-pid entry when the same endpoint is listed with a pid', () => {
    const out = normalizeListeners([native('tcp', '::', 8080, -1), native('tcp', '::', 8080, 12), native('tcp', '::', 8081, -1)]);
    expect(out).toEqual([
      { protocol: 'tcp', address: '::', port: 8080, pid: 12 },
      { protocol: 'tcp', address: '::', port: 8081 },
    ]);
  });

  it('skips protocols it does not know and impossible ports', () => {
    const out = normalizeListeners([native('sctp', '127.0.0.1', 9, 1), native('tcp', '127.0.0.1', 0, 1), native('udp', '::1', 70000, 1)]);
    expect(out).toEqual([]);
  });
});

describe('formatListener', () => {
  it('brackets IPv6, shows unix paths as they are, adds the pid when known', () => {
    expect(formatListener({ protocol: 'tcp', address: '127.0.0.1', port: 3000, pid: 5 })).toBe('tcp 127.0.0.1:3000 (pid 5)');
    expect(formatListener({ protocol: 'tcp', address: '::1', port: 3000 })).toBe('tcp [::1]:3000');
    expect(formatListener({ protocol: 'unix', address: '@name', pid: 2 })).toBe('unix @name (pid 2)');
  });
});

describe('resolveReady', () => {
  it('null for undefined and null; the conditions as given', () => {
    expect(resolveReady(undefined)).toBeNull();
    expect(resolveReady(null)).toBeNull();
    expect(resolveReady({ listening: true })).toEqual({ listening: true, output: null, timeout: null });
    expect(resolveReady({ listening: 3000, output: /ready/, timeout: 5000 })).toEqual({ listening: 3000, output: /ready/, timeout: 5000 });
    expect(resolveReady({ output: 'Listening on' })).toEqual({ listening: null, output: 'Listening on', timeout: null });
  });

  it("throws Node's codes for wrong types and values", () => {
    expect(() => resolveReady('yes')).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => resolveReady([])).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => resolveReady({ listening: false })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => resolveReady({ listening: '3000' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => resolveReady({ listening: 0 })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => resolveReady({ listening: 65536 })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => resolveReady({ listening: 80.5 })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => resolveReady({ output: 42 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => resolveReady({ output: '' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => resolveReady({ listening: true, timeout: '1s' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_TYPE' }));
    expect(() => resolveReady({ listening: true, timeout: 0 })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => resolveReady({ listening: true, timeout: Infinity })).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    // Nothing to wait for is a mistake, not an immediate "ready".
    expect(() => resolveReady({ timeout: 1000 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
    expect(() => resolveReady({})).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG_VALUE' }));
  });

  it('names the property in the message', () => {
    expect(() => resolveReady({ listening: '3000' })).toThrow(/"options\.ready\.listening" property/);
  });
});

describe('matchesListening and readyReached', () => {
  const tcp3000: Listener = { protocol: 'tcp', address: '::', port: 3000, pid: 1 };
  const udp53: Listener = { protocol: 'udp', address: '127.0.0.1', port: 53, pid: 1 };
  const sock: Listener = { protocol: 'unix', address: '/tmp/s', pid: 1 };

  it('true wants any listener, a number a tcp or udp listener on that port', () => {
    expect(matchesListening([], true)).toBe(false);
    expect(matchesListening([sock], true)).toBe(true);
    expect(matchesListening([tcp3000], 3000)).toBe(true);
    expect(matchesListening([udp53], 53)).toBe(true);
    expect(matchesListening([tcp3000, udp53], 3001)).toBe(false);
    expect(matchesListening([sock], 0 as number)).toBe(false);
  });

  it('every given condition must hold', () => {
    const both = resolveReady({ listening: 3000, output: 'up' });
    if (!both) throw new Error('resolved to null');
    expect(readyReached(both, { listeners: [tcp3000], outputMatched: false })).toBe(false);
    expect(readyReached(both, { listeners: null, outputMatched: true })).toBe(false);
    expect(readyReached(both, { listeners: [udp53], outputMatched: true })).toBe(false);
    expect(readyReached(both, { listeners: [tcp3000], outputMatched: true })).toBe(true);
    const out = resolveReady({ output: 'up' });
    if (!out) throw new Error('resolved to null');
    expect(readyReached(out, { listeners: null, outputMatched: true })).toBe(true);
  });
});

describe('outputMatcher', () => {
  it('finds a string split across chunks, and stays matched', () => {
    const m = outputMatcher('Listening on');
    expect(m.push('server starting\nListe')).toBe(false);
    expect(m.push('ning on :3000\n')).toBe(true);
    expect(m.matched).toBe(true);
    expect(m.push('anything')).toBe(true);
  });

  it('finds a RegExp split across chunks; g and y flags do not make it skip', () => {
    const m = outputMatcher(/port (\d+)/gy);
    expect(m.push('po')).toBe(false);
    expect(m.push('rt 80')).toBe(true);
    const again = outputMatcher(/ready/g);
    expect(again.push('not yet')).toBe(false);
    expect(again.push(' ... ready')).toBe(true);
  });

  it('keeps a bounded window: memory does not grow with the output', () => {
    const m = outputMatcher(/needle/, 16);
    for (let i = 0; i < 1000; i++) expect(m.push('x'.repeat(100))).toBe(false);
    expect(m.push('nee')).toBe(false);
    expect(m.push('dle')).toBe(true);
  });

  it('a one-character string needs no tail', () => {
    const m = outputMatcher('$');
    expect(m.push('abc')).toBe(false);
    expect(m.push('$ ')).toBe(true);
  });
});
