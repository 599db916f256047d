// The harness the guardian scenario SIGKILLs: started by the scenario under
// the same runtime, it starts 5 calls whose trees escape their process
// group, prints where they live, and waits to be killed. CommonJS, so that
// it runs as is under Node, Bun and Deno.
'use strict';
const path = require('node:path');
const fs = require('node:fs');

const root = process.env.PROCTREE_PACKAGE_ROOT || path.resolve(__dirname, '..', '..', '..');
const { Supervisor } = require(root);

const T = process.argv[2];
const sup = new Supervisor({ name: 'runtime-guardian' });
const calls = [];
for (let i = 0; i < 5; i++) {
  const call = sup.spawn('bash', ['-c', `setsid sleep ${T} & nohup sleep ${T} >/dev/null 2>&1 & exec sleep ${T}`], { stdio: 'ignore' });
  call.on('error', (err) => fs.writeSync(2, `call error: ${err.stack || err}\n`));
  calls.push(call);
}
const poll = setInterval(() => {
  if (!calls.every((c) => c.members().length === 3)) return;
  clearInterval(poll);
  fs.writeSync(1, `${JSON.stringify({ group: path.dirname(calls[0].cgroup), leaves: calls.map((c) => c.cgroup) })}\n`);
  // Stay alive until killed.
  setInterval(() => {}, 1000);
}, 10);
