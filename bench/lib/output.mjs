// Writes a run's outputs: the raw JSON, the SVG plots, the Markdown tables on
// stdout and, for a full run, the results part of bench/README.md.
import fs from 'node:fs';
import path from 'node:path';

import { renderSvg } from './plot.mjs';

const README_START = '<!-- bench:results:start (written by npm run bench; edit above or below) -->';
const README_END = '<!-- bench:results:end -->';

const SECTION_ORDER = ['completeness', 'spawnLatency', 'cleanupLatency', 'throughput', 'memory', 'shutdown', 'ptyLatency', 'cpuPerCall', 'ports', 'seal'];

// The issues whose goals are checked, in the order their verdicts are shown.
const ISSUES = {
  2: 'spawn → exit of /bin/true under proctree vs child_process.spawn',
  14: 'harness CPU per call, event-loop stalls, cleanup and per-call cost against the C floor',
  29: 'CPU per call, spawn latency, kill times and memory against what the kernel needs',
  28: 'what ports() and ready polling cost',
  26: 'what sealing a call costs, against what its namespaces cost the kernel',
};
const issueOf = (c) => c.issue ?? 2;

export async function writeOutputs(run) {
  const { benchDir, quick, partial, command, startedAt, wallMs, machine, cfg, raw, reports } = run;
  const resultsDir = path.join(benchDir, 'results');
  fs.mkdirSync(resultsDir, { recursive: true });
  // Only a full run replaces the committed results; the others are ignored files.
  const prefix = quick ? 'quick-' : partial ? 'partial-' : '';

  const images = {};
  for (const [name, rep] of Object.entries(reports)) {
    images[name] = [];
    for (const plot of rep.plots ?? []) {
      const file = `${prefix}${plot.file}`;
      fs.writeFileSync(path.join(resultsDir, file), await renderSvg(plot.spec));
      images[name].push({ file: `results/${file}`, alt: plot.title });
    }
  }

  const checks = Object.values(reports).flatMap((r) => r.checks ?? []);
  const json = {
    schema: 1,
    command,
    startedAt,
    wallMs,
    machine,
    config: cfg,
    checks,
    summaries: Object.fromEntries(Object.entries(reports).map(([k, r]) => [k, r.summary ?? null])),
    raw,
  };
  const jsonFile = quick ? 'quick.json' : partial ? 'partial.json' : 'latest.json';
  fs.writeFileSync(path.join(resultsDir, jsonFile), `${JSON.stringify(json, null, 1)}\n`);

  const md = markdown({ command, startedAt, wallMs, machine, checks, reports, images, jsonFile });
  process.stdout.write(`${md}\n`);
  // The verdicts once more, last, where a CI log is read first.
  for (const c of checks) process.stdout.write(`\nIssue ${issueOf(c)}: ${c.pass ? 'PASS' : 'FAIL'}: ${c.text}`);
  process.stdout.write(`\n\nWall time ${(wallMs / 1000).toFixed(1)} s (${command}).\n`);
  if (!quick && !partial) updateReadme(path.join(benchDir, 'README.md'), md);
}

function markdown({ command, startedAt, wallMs, machine, checks, reports, images, jsonFile }) {
  const out = [];
  out.push(
    `Made by \`${command}\` on ${startedAt.slice(0, 10)}: Linux ${machine.kernel} ${machine.arch}, ` +
      `${machine.cores} cores (${machine.cpuModel}), ${machine.memTotalGiB} GiB, Node ${machine.node}, ` +
      `pid_max ${machine.pidMax}, transparent huge pages \`${machine.transparentHugepage}\`, load average ${machine.loadAverage.start[0].toFixed(1)} at start and ${machine.loadAverage.end[0].toFixed(1)} at end; ` +
      `proctree at ${machine.proctree.commit ?? '?'}${machine.proctree.uncommittedSourceChanges ? ` with ${machine.proctree.uncommittedSourceChanges} uncommitted source file(s)` : ''}, spawning with ${machine.cloneMethod}. ` +
      `Wall time ${(wallMs / 1000).toFixed(0)} s. Raw samples: [results/${jsonFile}](results/${jsonFile}).`,
  );
  out.push('');
  out.push('Cells are `median (min–max)`; every comparison is a ratio of medians measured in this same run.');
  const issues = [...new Set(checks.map(issueOf))].sort((a, b) => a - b);
  for (const issue of issues) {
    out.push('', `### Issue ${issue}: ${ISSUES[issue] ?? ''}`, '');
    for (const c of checks.filter((k) => issueOf(k) === issue)) out.push(`- **${c.pass ? 'PASS' : 'FAIL'}** ${c.text}`);
  }
  let n = 0;
  for (const name of SECTION_ORDER) {
    const rep = reports[name];
    if (!rep) continue;
    n += 1;
    out.push('', `### ${n}. ${rep.title}`, '');
    for (const img of images[name] ?? []) out.push(`![${img.alt}](${img.file})`, '');
    out.push(rep.markdown);
  }
  return out.join('\n');
}

function updateReadme(file, md) {
  const block = `${README_START}\n${md}\n${README_END}`;
  let text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
  const a = text.indexOf(README_START);
  const b = text.indexOf(README_END);
  if (a >= 0 && b > a) text = text.slice(0, a) + block + text.slice(b + README_END.length);
  else text = `${text.trimEnd()}\n\n## Latest results\n\n${block}\n`;
  fs.writeFileSync(file, text);
}
