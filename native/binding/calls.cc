// spawn() and what JavaScript does to a call it started: terminate it (alone
// or with others, one freeze per shared subtree), signal it, pause and
// resume it, keep the loop alive for it or not, retire its leaf, wait for its
// exec's report; and shutdown() of everything at exit.
#include <napi.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "binding/addon.h"
#include "binding/errors.h"
#include "binding/spec.h"
#include "kernel/clone.h"
#include "kernel/limits.h"
#include "kernel/stdio_fds.h"
#include "ladder/cgroup_confinement.h"
#include "ladder/confinement.h"

namespace proctree {
namespace binding {

// spawn({ group, candidates, argv, env, cwd?, stdio, pty?, uid?, gid?,
//         tier, helper }, onEvent) -> { id, pid?, ... } | { error }
// env null: the command gets this process's own environment. A failure
// after the arguments were read is returned, never thrown.
Napi::Value Addon::Spawn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsFunction()) {
    return throw_type(env, "spawn(spec, onEvent)");
  }
  SpawnSpec spec;
  if (const char* wrong = read_spawn_spec(info[0].As<Napi::Object>(), keys_, &spec)) return throw_type(env, wrong);

  Napi::Object out = Napi::Object::New(env);
  if (!env_state_) {
    out.Set(keys_[Keys::kError], make_error(env, SysError::of(ECANCELED, "spawn")));
    return out;
  }
  // Limits live in a cgroup leaf of ours: never silently unlimited elsewhere.
  if (const unsigned needed = spec.opts.limits.controllers(); needed && spec.opts.tier != Tier::kCgroup) {
    std::string names;
    for (LimitController c : {kLimitMemory, kLimitPids, kLimitCpu}) {
      if (needed & c) names += std::string(names.empty() ? "" : ",") + limit_controller_name(c);
    }
    out.Set(keys_[Keys::kError], make_error(env, SysError::of(ENOTSUP, "limits",
                                                  names + ": the " + tier_name(spec.opts.tier) +
                                                      " tier has no cgroup leaf of ours to hold them; they need "
                                                      "the cgroup tier (see capabilities().limits)")));
    return out;
  }
  PreparedStdio stdio;
  SpawnedCall call;
  SysError e = prepare_stdio(spec.stdio, spec.pty, &stdio);
  if (!e) {
    spec.req.fds = stdio.fds;
    spec.req.controlling_tty = stdio.controlling_tty;
    e = env_state_->spawn(spec.opts, std::move(spec.req), &call);
  }
  if (e) {
    out.Set(keys_[Keys::kError], make_error(env, e));
    return out;
  }
  // The child has its copies now; ours would hold pipes open forever.
  stdio.child.clear();
  callbacks_[call.id] = Napi::Persistent(info[1].As<Napi::Function>());
  out.Set(keys_[Keys::kId], Napi::Number::New(env, static_cast<double>(call.id)));
  if (call.pid > 0) {
    out.Set(keys_[Keys::kPid], call.pid);
    if (call.exec_pending) out.Set(keys_[Keys::kExecPending], true);
  } else if (call.exec_pending) {
    // Deferred: queued for a spawner thread; settle() gives the pid.
    out.Set(keys_[Keys::kExecPending], true);
  } else {
    out.Set(keys_[Keys::kPending], true);
  }
  out.Set(keys_[Keys::kCgroup], call.cgroup);
  out.Set(keys_[Keys::kVerified], keys_.text(env, call.verified));
  out.Set(keys_[Keys::kMethod], keys_.text(env, clone_method_name(call.method)));
  // Our ends of 'pipe' entries (the facade makes its pipes itself and asks
  // for none): no array for a call without them.
  if (std::any_of(stdio.parent.begin(), stdio.parent.end(), [](const Fd& fd) { return fd.valid(); })) {
    Napi::Array fds = Napi::Array::New(env, stdio.parent.size());
    for (uint32_t i = 0; i < stdio.parent.size(); ++i) {
      fds.Set(i, stdio.parent[i] ? stdio.parent[i].release() : -1);
    }
    out.Set(keys_[Keys::kStdio], fds);
  }
  if (stdio.pty_master) out.Set(keys_[Keys::kPtyMaster], stdio.pty_master.release());
  if (call.guardian_error) out.Set(keys_[Keys::kGuardianError], make_error(env, call.guardian_error));
  return out;
}

Call* Addon::CallArg(const Napi::CallbackInfo& info) {
  if (!env_state_ || info.Length() < 1 || !info[0].IsNumber()) return nullptr;
  return env_state_->find(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()));
}

// terminate(id, graceMs, signal, reason) -> whether a cleanup event will come
Napi::Value Addon::Terminate(const Napi::CallbackInfo& info) {
  Call* c = CallArg(info);
  if (!c || info.Length() < 4) return Napi::Boolean::New(info.Env(), false);
  // A group of one: past the turn's budget (terminate() of many calls one
  // by one in one run of JavaScript) its start waits for a later turn, as a
  // group's do, so that the run does not hold the loop for every ladder.
  std::vector<bool> reporting = env_state_->terminate_group({c->id()}, {info[2].As<Napi::Number>().Int32Value()},
                                                            info[1].As<Napi::Number>().Int32Value(),
                                                            info[3].As<Napi::String>().Utf8Value());
  return Napi::Boolean::New(info.Env(), reporting[0]);
}

// terminateGroup(ids, signals, graceMs, reason) -> [whether a cleanup event
// will come, per call]: one freeze per shared subtree (see Environment).
Napi::Value Addon::TerminateGroup(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsArray() || !info[1].IsArray() || !info[2].IsNumber() || !info[3].IsString()) {
    return throw_type(env, "terminateGroup(ids, signals, graceMs, reason)");
  }
  Napi::Array ids_v = info[0].As<Napi::Array>();
  Napi::Array sigs_v = info[1].As<Napi::Array>();
  std::vector<uint64_t> ids;
  std::vector<int> sigs;
  for (uint32_t i = 0; i < ids_v.Length() && i < sigs_v.Length(); ++i) {
    ids.push_back(static_cast<uint64_t>(ids_v.Get(i).As<Napi::Number>().Int64Value()));
    sigs.push_back(sigs_v.Get(i).As<Napi::Number>().Int32Value());
  }
  std::vector<bool> reporting;
  if (env_state_) {
    reporting = env_state_->terminate_group(ids, sigs, info[2].As<Napi::Number>().Int32Value(),
                                            info[3].As<Napi::String>().Utf8Value());
  }
  Napi::Array out = Napi::Array::New(env, ids.size());
  for (uint32_t i = 0; i < ids.size(); ++i) out.Set(i, i < reporting.size() && reporting[i]);
  return out;
}

// kill(id, signal) -> how many processes got it
Napi::Value Addon::Kill(const Napi::CallbackInfo& info) {
  Call* c = CallArg(info);
  if (!c || info.Length() < 2) return Napi::Number::New(info.Env(), 0);
  return Napi::Number::New(info.Env(), c->signal_all(info[1].As<Napi::Number>().Int32Value()));
}

// setRef(id, ref): whether the call keeps the event loop alive.
Napi::Value Addon::SetRef(const Napi::CallbackInfo& info) {
  if (env_state_ && info.Length() >= 2 && info[0].IsNumber()) {
    env_state_->set_referenced(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()),
                               info[1].ToBoolean().Value());
  }
  return info.Env().Undefined();
}

// retire(id) -> [user µs, system µs, memory.peak]: the call's cgroup leaf
// names a job, no later call may get it; what its cpu.stat and memory.peak
// said when the call began.
Napi::Value Addon::Retire(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CpuCounters base;
  if (env_state_ && info.Length() > 0 && info[0].IsNumber()) {
    env_state_->retire(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()), &base);
  }
  Napi::Array out = Napi::Array::New(env, 3);
  out.Set(0u, Napi::Number::New(env, base.user_usec));
  out.Set(1u, Napi::Number::New(env, base.system_usec));
  // memory.peak when the call began (-1: a new leaf, or none): a reused
  // leaf's peak is this call's only once it grew past it.
  out.Set(2u, Napi::Number::New(env, base.limits.has_memory_peak ? static_cast<double>(base.limits.memory_peak) : -1));
  return out;
}

// pause(id, paused) -> undefined, or the error (ENOTSUP: the tier or the
// host cannot freeze; ESRCH: the tree is gone or being stopped). A Frozen
// event follows once cgroup.events shows the state asked for.
Napi::Value Addon::Pause(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsBoolean()) return throw_type(env, "pause(id, paused)");
  Call* c = CallArg(info);
  if (!c) return make_error(env, SysError::of(ESRCH, "cgroup.freeze"));
  if (SysError e = c->set_paused(info[1].As<Napi::Boolean>().Value())) return make_error(env, e);
  return env.Undefined();
}

// settle(id) -> the command's pid once it exec'd (true where the call is
// gone or has no pid of its own yet), or the error of the step that failed:
// waits for a pending exec's report (no event says it).
Napi::Value Addon::Settle(const Napi::CallbackInfo& info) {
  Call* c = CallArg(info);
  if (!c) return Napi::Boolean::New(info.Env(), true);
  // settle(id, waitMs?, quiet?): false when a shorter wait than the call's
  // bound ended before the exec reported. quiet: a pid answered is the
  // start's only word (no Started event follows it).
  int wait_ms = Call::kExecReportWaitMs;
  if (info.Length() > 1 && info[1].IsNumber()) wait_ms = std::max(0, info[1].As<Napi::Number>().Int32Value());
  const bool quiet = info.Length() > 2 && info[2].IsBoolean() && info[2].As<Napi::Boolean>().Value();
  bool pending = false;
  SysError e = c->settle_exec(wait_ms, &pending, quiet);
  if (e) return make_error(info.Env(), e);
  if (!pending && c->command_pid() > 0) return Napi::Number::New(info.Env(), c->command_pid());
  return Napi::Boolean::New(info.Env(), !pending);
}

// shutdown(waitMs): synchronous, for process 'exit'.
Napi::Value Addon::Shutdown(const Napi::CallbackInfo& info) {
  int wait_ms = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 2000;
  if (env_state_) env_state_->shutdown_sync(wait_ms);
  return info.Env().Undefined();
}

}  // namespace binding
}  // namespace proctree
