// A worker thread of the agent scenario: one call from there, its result
// posted back (structured-clone safe fields only).
import { parentPort, workerData } from 'node:worker_threads';

import { load } from './_lib.mjs';

const { run } = load();
const r = await run('sh', ['-c', 'echo worker "$1"', 'sh', workerData.T]);
parentPort.postMessage({ stdout: r.stdout, exitCode: r.exitCode, cleanup: r.cleanup });
