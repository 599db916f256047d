// Questions JavaScript asks about a call's tree, a cgroup, a process or the
// host: members, ports (answered later, from the loop's ports thread),
// processInfo, the subtree prefix, cgroup2 mounts, a cgroup's members,
// probe() of what this kernel and host allow, and which limits it can hold.
#include <napi.h>

#include <string>
#include <utility>
#include <vector>

#include "binding/addon.h"
#include "binding/errors.h"
#include "binding/values.h"
#include "kernel/cgroup.h"
#include "kernel/guardian_launch.h"
#include "kernel/limits.h"
#include "kernel/probe.h"
#include "kernel/procfs.h"

namespace proctree {
namespace binding {

Napi::Value Addon::Members(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call* c = CallArg(info);
  std::vector<pid_t> pids;
  if (c) pids = c->members();
  Napi::Array a = Napi::Array::New(env, pids.size());
  for (size_t i = 0; i < pids.size(); ++i) a.Set(static_cast<uint32_t>(i), pids[i]);
  return a;
}

// ports(id | cgroupPath | cgroupIds, onDone): what the call's tree (or
// everything in a cgroup2 directory and below it) listens on, or the
// sockets made in the cgroups with these ids (bigints) whoever holds them
// now; asked on the addon's ports thread, onDone(error, listeners) in a
// later turn (an unknown call or a cgroup that is gone: []). Throws only
// for bad arguments.
Napi::Value Addon::Ports(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !(info[0].IsNumber() || info[0].IsString() || info[0].IsArray()) || !info[1].IsFunction()) {
    return throw_type(env, "ports(id | cgroupPath | cgroupIds, onDone)");
  }
  if (!env_state_) return throw_sys(env, SysError::of(ECANCELED, "ports"));
  uint64_t request = 0;
  SysError e;
  if (info[0].IsArray()) {
    Napi::Array a = info[0].As<Napi::Array>();
    std::vector<unsigned long long> ids;
    for (uint32_t i = 0; i < a.Length(); ++i) {
      Napi::Value v = a.Get(i);
      bool lossless = false;
      if (!v.IsBigInt()) return throw_type(env, "ports(cgroupIds): bigints");
      ids.push_back(v.As<Napi::BigInt>().Uint64Value(&lossless));
    }
    e = env_state_->ports_of_cgroup_ids(std::move(ids), &request);
  } else if (info[0].IsString()) {
    e = env_state_->ports_of_cgroup(info[0].As<Napi::String>().Utf8Value(), &request);
  } else {
    e = env_state_->ports(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()), &request);
  }
  if (e) return throw_sys(env, e);
  ports_callbacks_[request] = Napi::Persistent(info[1].As<Napi::Function>());
  return env.Undefined();
}

// processInfo(pids, pgid?) -> what /proc says of those still there; with
// pgid, of the first of them in that process group only, and only its
// command line is read (a terminal's foreground group whose leader is gone,
// looked for on the JavaScript thread among all of a call's processes).
Napi::Value Addon::ProcessInfoOf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array out = Napi::Array::New(env);
  if (info.Length() < 1 || !info[0].IsArray()) return out;
  const bool one_group = info.Length() > 1 && info[1].IsNumber();
  const pid_t pgid = one_group ? info[1].As<Napi::Number>().Int32Value() : 0;
  Napi::Array pids = info[0].As<Napi::Array>();
  uint32_t n = 0;
  for (uint32_t i = 0; i < pids.Length(); ++i) {
    ProcessInfo p;
    const pid_t pid = pids.Get(i).As<Napi::Number>().Int32Value();
    if (!one_group) {
      if (read_process_info(pid, &p)) out.Set(n++, process_info_object(env, p));
      continue;
    }
    if (!read_process_stat(pid, &p) || p.pgid != pgid) continue;
    read_process_cmdline(pid, &p);
    out.Set(n++, process_info_object(env, p));
    break;
  }
  return out;
}

// describe(pids, onDone): processInfo(pids) read on the addon's ports
// thread, onDone(error, infos) in a later turn: /proc reads of many
// processes, or of one between fork and exec, can hold a thread for tens of
// milliseconds. Throws only for bad arguments.
Napi::Value Addon::Describe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsArray() || !info[1].IsFunction()) return throw_type(env, "describe(pids, onDone)");
  if (!env_state_) return throw_sys(env, SysError::of(ECANCELED, "describe"));
  Napi::Array a = info[0].As<Napi::Array>();
  std::vector<pid_t> pids;
  pids.reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value v = a.Get(i);
    if (!v.IsNumber()) return throw_type(env, "describe(pids): numbers");
    pids.push_back(v.As<Napi::Number>().Int32Value());
  }
  uint64_t request = 0;
  if (SysError e = env_state_->describe(std::move(pids), &request)) return throw_sys(env, e);
  ports_callbacks_[request] = Napi::Persistent(info[1].As<Napi::Function>());
  return env.Undefined();
}

// subtreePrefix() -> "proctree-<pid>-<random>", the same in every worker.
Napi::Value Addon::SubtreePrefix(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), subtree_prefix());
}

// cgroup2Hierarchies(mountinfo?) -> [{ mount, root }]: one mount per cgroup2
// hierarchy, of /proc/self/mountinfo or of the text given.
Napi::Value Addon::Cgroup2Hierarchies(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string text;
  if (info.Length() > 0 && info[0].IsString()) {
    text = info[0].As<Napi::String>().Utf8Value();
  } else if (!read_mountinfo(&text)) {
    return throw_sys(env, SysError::from_errno("open", "/proc/self/mountinfo"));
  }
  std::vector<Cgroup2Mount> mounts = cgroup2_hierarchies(text);
  Napi::Array out = Napi::Array::New(env, mounts.size());
  for (size_t i = 0; i < mounts.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("mount", mounts[i].mount);
    o.Set("root", mounts[i].root);
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

// cgroupMembers(path) -> every pid in that cgroup and the cgroups below it
// ([] when it is gone).
Napi::Value Addon::CgroupMembers(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) return throw_type(env, "cgroupMembers(path)");
  CgroupDir dir;
  std::vector<pid_t> pids;
  if (!CgroupDir::open_existing(info[0].As<Napi::String>().Utf8Value(), &dir)) dir.read_procs(&pids);
  dir.close();
  Napi::Array a = Napi::Array::New(env, pids.size());
  for (size_t i = 0; i < pids.size(); ++i) a.Set(static_cast<uint32_t>(i), pids[i]);
  return a;
}

// probe(helperPath) -> { location, probes: { name: { ok, errno?, syscall?, detail? } } }
// Blocks for a few milliseconds (see probe.h); the facade caches it.
Napi::Value Addon::ProbeHost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!env_state_) return throw_sys(env, SysError::of(ECANCELED, "probe"));
  if (info.Length() < 1 || !info[0].IsString()) return throw_type(env, "probe(helperPath)");
  HostProbes h = probe_host(info[0].As<Napi::String>().Utf8Value(), env_state_->child_stack());
  return host_probes_object(env, h);
}

namespace {

Napi::Object controllers_object(Napi::Env env, unsigned bits) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("memory", (bits & kLimitMemory) != 0);
  o.Set("pids", (bits & kLimitPids) != 0);
  o.Set("cpu", (bits & kLimitCpu) != 0);
  return o;
}

}  // namespace

// limitsProbe() -> { parent, available: { memory, pids, cpu }, reason }
// | { error }: where this harness's subtrees go (its cgroup, or the one
// its leaf sits in) and which limits their leaves can have there (enabled,
// or ours to enable); reason: why the others cannot, and the fix. File
// reads only (a few, cached by the facade).
Napi::Value Addon::LimitsProbe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  CgroupLocation loc;
  LimitsReach reach;
  SysError e = locate_cgroup2(&loc);
  std::string parent = e ? std::string() : subtree_parent(loc);
  if (!e) e = limits_reach(loc.mount, parent, &reach);
  if (e) {
    out.Set("error", make_error(env, e));
    return out;
  }
  out.Set("parent", parent);
  out.Set("available", controllers_object(env, reach.available));
  out.Set("reason", reach.reason);
  return out;
}

}  // namespace binding
}  // namespace proctree
