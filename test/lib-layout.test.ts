// The layout lib/README.md promises, checked from the sources: imports go
// one way (no circle in lib/ or in the Python client, type-only imports
// included), no source file grows past 600 lines unless its first comment
// says why it is one concern that cannot be cut, and the README names every
// file of lib/.
import fs from 'node:fs';
import path from 'node:path';

import { describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '..');

function walk(dir: string, ext: RegExp): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = path.join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name !== '__pycache__' && e.name !== 'node_modules') out.push(...walk(rel, ext));
    } else if (ext.test(e.name)) {
      out.push(rel);
    }
  }
  return out.sort();
}

/** The import graph of lib/: every `from '…'`, `import '…'` and `import('…')` of a relative module. */
function tsGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of walk('lib', /\.ts$/)) {
    const text = fs.readFileSync(path.join(root, file), 'utf8');
    const deps = new Set<string>();
    for (const m of text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)'(\.[^']*)'/gm)) {
      const base = path.join(path.dirname(file), m[1].replace(/\.js$/, ''));
      const target = [`${base}.ts`, path.join(base, 'index.ts')].find((f) => fs.existsSync(path.join(root, f)));
      if (target === undefined) throw new Error(`${file}: cannot resolve ${m[1]}`);
      deps.add(target);
    }
    graph.set(file, [...deps]);
  }
  return graph;
}

/** The Python client's graph: `from .x import`, `from . import x`, TYPE_CHECKING blocks included. */
function pyGraph(): Map<string, string[]> {
  const pkg = 'clients/python/proctree';
  const graph = new Map<string, string[]>();
  const modules = new Set(walk(pkg, /\.py$/).map((f) => path.basename(f, '.py')));
  for (const file of walk(pkg, /\.py$/)) {
    const text = fs.readFileSync(path.join(root, file), 'utf8');
    const deps = new Set<string>();
    for (const m of text.matchAll(/^\s*from\s+(?:\.|proctree)(\w*)\s+import\s+([\w, ()\n]+)/gm)) {
      // `from ._call import x` names a module; `from . import blocking` names modules.
      const names = m[1] ? [m[1]] : m[2].split(/[\s,()]+/);
      for (const n of names) if (modules.has(n)) deps.add(`${pkg}/${n}.py`);
    }
    // The package's __init__ imports everything; importing the package itself is no edge.
    graph.set(file, [...deps].filter((d) => !d.endsWith('/__init__.py')));
  }
  return graph;
}

/** Strongly connected components with more than one member (or a self-import): the circles. */
function circles(graph: Map<string, string[]>): string[][] {
  let index = 0;
  const stack: string[] = [];
  const onStack = new Set<string>();
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v) as number, idx.get(w) as number));
      }
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return found;
}

describe('the layout of the sources', () => {
  it('lib/ has no import circle, type-only imports included', () => {
    const graph = tsGraph();
    expect(graph.size).toBeGreaterThan(30);
    expect(circles(graph)).toEqual([]);
  });

  it('the Python client has no import circle', () => {
    const graph = pyGraph();
    expect(graph.size).toBeGreaterThan(5);
    expect(circles(graph)).toEqual([]);
  });

  it('the circle check sees one', () => {
    const graph = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a']],
      ['d', ['a']],
    ]);
    expect(circles(graph)).toEqual([['a', 'b', 'c']]);
  });

  it('no source file over 600 lines, unless its first comment says it is one concern that cannot be cut', () => {
    const sources = [
      ...walk('lib', /\.ts$/),
      ...walk('clients', /\.py$/),
      ...walk('native', /\.(cc|h)$/),
    ];
    const long = sources.filter((f) => {
      const text = fs.readFileSync(path.join(root, f), 'utf8');
      const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
      const head = text.split('\n').slice(0, 8).join('\n');
      return lines > 600 && !/cannot be cut/.test(head);
    });
    expect(long).toEqual([]);
  });

  it('lib/README.md names every file of lib/', () => {
    const readme = fs.readFileSync(path.join(root, 'lib/README.md'), 'utf8');
    const unnamed = walk('lib', /\.ts$/).filter((f) => {
      const name = path.basename(f, '.ts');
      return !new RegExp(`(^|[\\s/(\`])${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(\\.ts)?([\\s,.:)\`*]|$)`, 'm').test(readme);
    });
    expect(unnamed).toEqual([]);
  });
});
