// Vega-Lite specs rendered to SVG headlessly (vega's View with no renderer).
import * as vega from 'vega';
import * as vl from 'vega-lite';

export async function renderSvg(spec) {
  const full = { $schema: 'https://vega.github.io/schema/vega-lite/v6.json', background: 'white', ...spec };
  const view = new vega.View(vega.parse(vl.compile(full).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

// Fixed colours per method, so every plot reads the same.
const COLORS = {
  proctree: '#d62728',
  child_process: '#1f77b4',
  execa: '#9467bd',
  killpg: '#ff7f0e',
  'tree-kill': '#8c564b',
  'C floor': '#7f7f7f',
  'C floor + cgroup': '#2ca02c',
  'cgroup.kill (floor)': '#2ca02c',
};

/** A colour scale for just these methods, in this order. */
export function methodColors(methods) {
  return { domain: methods, range: methods.map((m) => COLORS[m] ?? '#000000') };
}
