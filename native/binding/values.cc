// JavaScript objects made of what the native layers report (values.h).
#include "binding/values.h"

#include <napi.h>

#include "loop/errno_name.h"

namespace proctree {
namespace binding {

Napi::Object process_info_object(Napi::Env env, const ProcessInfo& p) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("pid", p.pid);
  o.Set("ppid", p.ppid);
  o.Set("pgid", p.pgid);
  o.Set("sid", p.sid);
  o.Set("comm", p.comm);
  o.Set("cmdline", p.cmdline);
  o.Set("startTime", static_cast<double>(p.start_time));
  return o;
}

Napi::Object report_object(Napi::Env env, const CleanupReport& report) {
  Napi::Object r = Napi::Object::New(env);
  r.Set("reason", report.reason);
  r.Set("signaled", report.signaled);
  r.Set("killed", report.killed);
  r.Set("escaped", report.escaped);
  r.Set("verified", report.verified);
  Napi::Array left = Napi::Array::New(env, report.leftovers.size());
  for (size_t i = 0; i < report.leftovers.size(); ++i) left.Set(static_cast<uint32_t>(i), report.leftovers[i]);
  r.Set("leftoverPids", left);
  r.Set("durationMs", report.duration_ms);
  return r;
}

namespace {

Napi::Object probe_object(Napi::Env env, const Probe& p) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("ok", p.ok);
  if (!p.ok) {
    o.Set("errno", errno_name(p.err));
    if (p.syscall[0]) o.Set("syscall", p.syscall);
  }
  if (!p.detail.empty()) o.Set("detail", p.detail);
  return o;
}

}  // namespace

Napi::Object host_probes_object(Napi::Env env, const HostProbes& h) {
  Napi::Object out = Napi::Object::New(env);
  if (h.cgroup2.ok) {
    Napi::Object loc = Napi::Object::New(env);
    loc.Set("mount", h.location.mount);
    loc.Set("own", h.location.own);
    loc.Set("ownPath", h.location.own_path);
    out.Set("location", loc);
  } else {
    out.Set("location", env.Null());
  }
  Napi::Object probes = Napi::Object::New(env);
  probes.Set("cgroup2", probe_object(env, h.cgroup2));
  probes.Set("delegation", probe_object(env, h.delegation));
  probes.Set("clone3", probe_object(env, h.clone3));
  probes.Set("cloneIntoCgroup", probe_object(env, h.clone_into_cgroup));
  probes.Set("pidfd", probe_object(env, h.pidfd));
  probes.Set("pidfdSendSignal", probe_object(env, h.pidfd_send_signal));
  probes.Set("waitidPidfd", probe_object(env, h.waitid_pidfd));
  probes.Set("freeze", probe_object(env, h.freeze));
  probes.Set("cgroupKill", probe_object(env, h.cgroup_kill));
  probes.Set("pidns", probe_object(env, h.pidns));
  probes.Set("userns", probe_object(env, h.userns));
  probes.Set("subreaper", probe_object(env, h.subreaper));
  probes.Set("seal", probe_object(env, h.seal));
  probes.Set("helper", probe_object(env, h.helper));
  probes.Set("userManager", probe_object(env, h.user_manager));
  out.Set("probes", probes);
  return out;
}

}  // namespace binding
}  // namespace proctree
