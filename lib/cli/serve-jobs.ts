// The jobs requests of `proctree serve`: listing the supervisor's jobs and
// reading, stopping and waiting for one by its job id. A job outlives the
// call that made it, so these reach it through the supervisor, not the
// server's open calls.
import { job, jobs } from '../supervisor';
import type { Request } from './protocol';
import type { Answer } from './serve-request';

/** The requests that name a job (or list them all). */
export type JobRequest = Extract<Request, { op: 'jobs' | 'jobPorts' | 'jobRead' | 'jobTail' | 'jobStop' | 'jobWait' | 'jobPause' | 'jobResume' }>;

/** Answers one jobs request; the supervisor's errors (an unknown job id) are thrown as they come. */
export function jobRequest(req: JobRequest): Answer {
  switch (req.op) {
    case 'jobs':
      // Each with what its tree listens on now (asked of all at once, off the JS thread).
      return Promise.all(
        jobs().map(async (info) => {
          const ports = await job(info.id).ports();
          return { ...info, listeners: ports, listenersAt: Date.now(), ports };
        }),
      ).then((list) => ({ jobs: list }));
    case 'jobPorts':
      return job(req.job)
        .ports()
        .then((ports) => ({ ports }));
    case 'jobRead':
      return { ...job(req.job).read(req.from ?? 0, req.maxBytes === undefined ? {} : { maxBytes: req.maxBytes }) };
    case 'jobTail':
      return { ...job(req.job).tail(req.bytes) };
    case 'jobStop':
      return job(req.job)
        .stop(req.grace === undefined ? {} : { grace: req.grace })
        .then((report) => ({ report }));
    case 'jobWait':
      return job(req.job)
        .wait()
        .then((info) => ({ job: info }));
    case 'jobPause':
    case 'jobResume': {
      const j = job(req.job);
      return (req.op === 'jobPause' ? j.pause() : j.resume()).then(() => ({ paused: j.paused }));
    }
  }
}
