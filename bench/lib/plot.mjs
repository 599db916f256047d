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
export const METHOD_COLORS = {
  domain: ['proctree', 'child_process', 'execa', 'killpg', 'tree-kill', 'C floor', 'C floor + cgroup'],
  range: ['#d62728', '#1f77b4', '#9467bd', '#ff7f0e', '#8c564b', '#7f7f7f', '#2ca02c'],
};
