// The worker-thread side of the 'proctree (worker)' method (methods.mjs):
// starts one proctree call and stops it when asked, so that none of
// proctree's work runs on the thread whose loop the bench watches.
import { parentPort, workerData } from 'node:worker_threads';

import { spawn } from 'proctree';

const { file, args, grace } = workerData;
const call = spawn(file, args, { stdio: 'ignore', grace });
const errors = [];
call.on('error', (err) => errors.push(err.message));
const closed = new Promise((resolve) => call.once('close', resolve));
parentPort.postMessage({ pid: call.pid, cgroup: call.cgroup });
parentPort.on('message', async (m) => {
  if (m === 'stop') {
    const report = await call.terminate({ grace });
    parentPort.postMessage({ report, errors });
  } else if (m === 'close') {
    await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 5000))]);
    parentPort.postMessage({ closed: true });
  }
});
