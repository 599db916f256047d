// Summaries and the way every comparison is shown: a ratio of medians from the
// same run, next to the min and max it came from.

export function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  const at = (sorted.length - 1) * q;
  const lo = Math.floor(at);
  const hi = Math.ceil(at);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
}

export function summarize(samples) {
  const s = samples.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return {
    n: s.length,
    median: quantile(s, 0.5),
    min: s.length ? s[0] : NaN,
    max: s.length ? s[s.length - 1] : NaN,
    p10: quantile(s, 0.1),
    p90: quantile(s, 0.9),
    p99: quantile(s, 0.99),
  };
}

/** A number with about three significant digits. */
export function num(x) {
  if (!Number.isFinite(x)) return '–';
  const a = Math.abs(x);
  if (a >= 100) return x.toFixed(0);
  if (a >= 10) return x.toFixed(1);
  if (a >= 1) return x.toFixed(2);
  if (a >= 0.01) return x.toFixed(3);
  return x.toPrecision(2);
}

/** `median (min–max)` */
export function cell(summary) {
  if (!summary || !summary.n) return '–';
  if (summary.n === 1) return num(summary.median);
  return `${num(summary.median)} (${num(summary.min)}–${num(summary.max)})`;
}

export function ratioCell(r) {
  return Number.isFinite(r) ? `${num(r)}×` : '–';
}

export function table(header, rows) {
  const line = (cells) => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
