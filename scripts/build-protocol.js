// Compiles the request schemas of docs/protocol.schema.json (the one
// description of the server's protocol) into plain validator functions, at
// build time: `proctree serve` then validates each request without loading
// and running ajv's compiler, which cost it about 15 MB of its memory.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const Ajv2020 = require('ajv/dist/2020').default;
const standaloneCode = require('ajv/dist/standalone').default;

/** Writes dist/cjs/cli/protocol-validators.js: `requestEnvelope` and one validator per op, named by the op. */
function buildProtocolValidators(root) {
  const schema = JSON.parse(fs.readFileSync(path.join(root, 'docs', 'protocol.schema.json'), 'utf8'));
  // The options of lib/cli/protocol.ts's checks; shared $defs are called, not copied into every op.
  const ajv = new Ajv2020({ allErrors: false, strict: true, allowUnionTypes: true, inlineRefs: false, code: { source: true } });
  ajv.addSchema(schema, 'protocol');
  const refs = { requestEnvelope: 'protocol#/$defs/requestEnvelope' };
  for (const op of schema.$defs.requestEnvelope.properties.op.enum) refs[op] = `protocol#/$defs/${op}Request`;
  const out = path.join(root, 'dist', 'cjs', 'cli', 'protocol-validators.js');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, `// Generated from docs/protocol.schema.json by scripts/build-protocol.js.\n${standaloneCode(ajv, refs)}\n`);
}

module.exports = { buildProtocolValidators };
