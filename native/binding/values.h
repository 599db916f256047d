// JavaScript objects made of what the native layers report: a process's
// /proc facts, a call's cleanup report, the host's probes. The shapes are the
// ones lib/binding/contract.ts declares.
#pragma once

#include <napi.h>

#include "kernel/probe.h"
#include "kernel/procfs.h"
#include "ladder/ladder.h"

namespace proctree {
namespace binding {

// { pid, ppid, pgid, sid, comm, cmdline, startTime }
Napi::Object process_info_object(Napi::Env env, const ProcessInfo& p);
// { reason, signaled, killed, escaped, verified, leftoverPids, durationMs }
Napi::Object report_object(Napi::Env env, const CleanupReport& report);
// { location, probes: { name: { ok, errno?, syscall?, detail? } } }
Napi::Object host_probes_object(Napi::Env env, const HostProbes& h);

}  // namespace binding
}  // namespace proctree
