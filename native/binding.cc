// The only file that knows about N-API: turns the registry of calls into a
// JavaScript object per environment (main thread or worker) and delivers call
// events through napi_make_callback on the environment's own loop.
#include <napi.h>

#include <string>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "kernel/guardian_launch.h"
#include "kernel/probe.h"
#include "kernel/procfs.h"
#include "loop/errno_name.h"
#include "loop/registry.h"
#include "kernel/stdio_pipes.h"

namespace proctree {
namespace {

Napi::Object make_error(Napi::Env env, const SysError& e) {
  const char* code = errno_name(e.err);
  std::string message = std::string(e.syscall) + " " + code;
  if (!e.path.empty()) message += " '" + e.path + "'";
  Napi::Error err = Napi::Error::New(env, message);
  Napi::Object obj = err.Value();
  obj.Set("code", code);
  obj.Set("errno", -e.err);
  obj.Set("syscall", e.syscall);
  if (!e.path.empty()) obj.Set("path", e.path);
  return obj;
}

Napi::Object process_info_object(Napi::Env env, const ProcessInfo& p) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("pid", p.pid);
  o.Set("ppid", p.ppid);
  o.Set("pgid", p.pgid);
  o.Set("sid", p.sid);
  o.Set("comm", p.comm);
  o.Set("cmdline", p.cmdline);
  return o;
}

bool read_strings(Napi::Value v, std::vector<std::string>* out) {
  if (!v.IsArray()) return false;
  Napi::Array a = v.As<Napi::Array>();
  out->clear();
  out->reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value item = a.Get(i);
    if (!item.IsString()) return false;
    out->push_back(item.As<Napi::String>().Utf8Value());
  }
  return true;
}

bool read_stdio(Napi::Value v, StdioSpec (&spec)[3]) {
  if (!v.IsArray() || v.As<Napi::Array>().Length() != 3) return false;
  Napi::Array a = v.As<Napi::Array>();
  for (uint32_t i = 0; i < 3; ++i) {
    Napi::Value item = a.Get(i);
    if (item.IsNumber()) {
      spec[i].kind = StdioSpec::kFd;
      spec[i].fd = item.As<Napi::Number>().Int32Value();
      continue;
    }
    if (!item.IsString()) return false;
    std::string s = item.As<Napi::String>().Utf8Value();
    if (s == "pipe") {
      spec[i].kind = StdioSpec::kPipe;
    } else if (s == "ignore") {
      spec[i].kind = StdioSpec::kIgnore;
    } else if (s == "inherit") {
      spec[i].kind = StdioSpec::kInherit;
    } else {
      return false;
    }
  }
  return true;
}

class Addon : public Napi::Addon<Addon>, public EventSink {
 public:
  Addon(Napi::Env env, Napi::Object exports) : env_(env) {
    DefineAddon(exports, {
                             InstanceMethod("spawn", &Addon::Spawn),
                             InstanceMethod("terminate", &Addon::Terminate),
                             InstanceMethod("kill", &Addon::Kill),
                             InstanceMethod("members", &Addon::Members),
                             InstanceMethod("processInfo", &Addon::ProcessInfoOf),
                             InstanceMethod("shutdown", &Addon::Shutdown),
                             InstanceMethod("pipe", &Addon::Pipe),
                             InstanceMethod("setRef", &Addon::SetRef),
                             InstanceMethod("closeFd", &Addon::CloseFd),
                             InstanceMethod("ensureGuardian", &Addon::EnsureGuardian),
                             InstanceMethod("subtreePrefix", &Addon::SubtreePrefix),
                             InstanceMethod("probe", &Addon::ProbeHost),
                         });
    // node_api.h declares the loop type; only loop/ includes uv.h.
    struct uv_loop_s* loop = nullptr;
    napi_get_uv_event_loop(env, &loop);
    registry_ = new Registry(loop, this);
    napi_value resource_name = Napi::String::New(env, "proctree:call");
    napi_async_init(env, nullptr, resource_name, &async_context_);
    // Registered first so it runs last: the synchronous hook below has
    // already killed everything by then, this one only closes libuv handles
    // (closing them in a synchronous hook can crash a worker).
    napi_add_async_cleanup_hook(env, AsyncCleanup, this, &async_hook_);
    napi_add_env_cleanup_hook(env, SyncCleanup, this);
  }

  ~Addon() override {
    // The registry frees itself once its handles have closed (AsyncCleanup);
    // if that never started, the process is exiting and nothing is left to do.
    if (registry_) registry_->shutdown_sync(0);
  }

  void deliver(const CallEvent& ev) override {
    auto it = callbacks_.find(ev.call_id);
    if (it == callbacks_.end()) return;
    Napi::HandleScope scope(env_);
    Napi::Function fn = it->second.Value();
    std::vector<napi_value> args;
    args.push_back(Napi::Number::New(env_, ev.kind));
    switch (ev.kind) {
      case CallEvent::kExit:
        args.push_back(ev.exit.code >= 0 ? Napi::Number::New(env_, ev.exit.code) : env_.Null());
        args.push_back(Napi::Number::New(env_, ev.exit.signal));
        break;
      case CallEvent::kCleanup: {
        Napi::Object r = Napi::Object::New(env_);
        r.Set("reason", ev.report.reason);
        r.Set("signaled", ev.report.signaled);
        r.Set("killed", ev.report.killed);
        r.Set("escaped", ev.report.escaped);
        r.Set("froze", ev.report.froze);
        r.Set("verified", ev.report.verified);
        Napi::Array left = Napi::Array::New(env_, ev.report.leftovers.size());
        for (size_t i = 0; i < ev.report.leftovers.size(); ++i) {
          left.Set(static_cast<uint32_t>(i), process_info_object(env_, ev.report.leftovers[i]));
        }
        r.Set("leftovers", left);
        r.Set("durationMs", ev.report.duration_ms);
        args.push_back(r);
        break;
      }
      case CallEvent::kError:
        args.push_back(make_error(env_, ev.error));
        break;
      case CallEvent::kEmpty:
        break;
    }
    Napi::Object recv = Napi::Object::New(env_);
    napi_value result;
    napi_status st = napi_make_callback(env_, async_context_, recv, fn, args.size(), args.data(), &result);
    if (ev.kind == CallEvent::kEmpty) callbacks_.erase(ev.call_id);
    if (st == napi_pending_exception) {
      // A listener threw: that is an uncaught exception of the harness, as
      // it would be for a ChildProcess listener, never swallowed here.
      napi_value exc;
      napi_get_and_clear_last_exception(env_, &exc);
      napi_fatal_exception(env_, exc);
    }
  }

 private:
  static void SyncCleanup(void* arg) {
    Addon* self = static_cast<Addon*>(arg);
    if (self->registry_) self->registry_->shutdown_sync(2000);
  }

  static void AsyncCleanup(napi_async_cleanup_hook_handle handle, void* arg) {
    Addon* self = static_cast<Addon*>(arg);
    Registry* reg = self->registry_;
    self->registry_ = nullptr;
    self->callbacks_.clear();
    napi_async_destroy(self->env_, self->async_context_);
    if (!reg) {
      napi_remove_async_cleanup_hook(handle);
      return;
    }
    reg->shutdown_sync(2000);
    struct Closing {
      Registry* reg;
      napi_async_cleanup_hook_handle handle;
    };
    auto* closing = new Closing{reg, handle};
    reg->close_handles(
        [](void* p) {
          auto* c = static_cast<Closing*>(p);
          napi_remove_async_cleanup_hook(c->handle);
          delete c->reg;
          delete c;
        },
        closing);
  }

  Napi::Value ThrowSys(Napi::Env env, const SysError& e) {
    napi_throw(env, make_error(env, e));
    return env.Undefined();
  }

  Napi::Value ThrowType(Napi::Env env, const char* message) {
    Napi::TypeError::New(env, message).ThrowAsJavaScriptException();
    return env.Undefined();
  }

  // spawn({ group, candidates, argv, env, cwd?, stdio, uid?, gid? }, onEvent)
  Napi::Value Spawn(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!registry_) return ThrowSys(env, SysError::of(ECANCELED, "spawn"));
    if (info.Length() < 2 || !info[0].IsObject() || !info[1].IsFunction()) {
      return ThrowType(env, "spawn(spec, onEvent)");
    }
    Napi::Object spec = info[0].As<Napi::Object>();
    SpawnRequest req;
    if (!spec.Get("group").IsString()) return ThrowType(env, "spec.group");
    std::string group = spec.Get("group").As<Napi::String>().Utf8Value();
    if (!read_strings(spec.Get("candidates"), &req.candidates)) return ThrowType(env, "spec.candidates");
    if (!read_strings(spec.Get("argv"), &req.argv)) return ThrowType(env, "spec.argv");
    if (!read_strings(spec.Get("env"), &req.envp)) return ThrowType(env, "spec.env");
    Napi::Value cwd = spec.Get("cwd");
    if (cwd.IsString()) req.cwd = cwd.As<Napi::String>().Utf8Value();
    Napi::Value uid = spec.Get("uid");
    if (uid.IsNumber()) {
      req.set_uid = true;
      req.uid = uid.As<Napi::Number>().Uint32Value();
    }
    Napi::Value gid = spec.Get("gid");
    if (gid.IsNumber()) {
      req.set_gid = true;
      req.gid = gid.As<Napi::Number>().Uint32Value();
    }
    StdioSpec stdio_spec[3];
    if (!read_stdio(spec.Get("stdio"), stdio_spec)) return ThrowType(env, "spec.stdio");
    Tier tier = Tier::kCgroup;
    Napi::Value tier_v = spec.Get("tier");
    if (tier_v.IsString()) {
      std::string t = tier_v.As<Napi::String>().Utf8Value();
      if (t == "pidns") {
        tier = Tier::kPidns;
      } else if (t == "subreaper") {
        tier = Tier::kSubreaper;
      } else if (t == "pgroup") {
        tier = Tier::kPgroup;
      } else if (t != "cgroup") {
        return ThrowType(env, "spec.tier");
      }
    }
    std::string helper;
    if (spec.Get("helper").IsString()) helper = spec.Get("helper").As<Napi::String>().Utf8Value();

    PreparedStdio stdio;
    SysError e = prepare_stdio(stdio_spec, &stdio);
    SpawnedCall call;
    if (!e) {
      for (int i = 0; i < 3; ++i) req.stdio[i] = stdio.child[i].get();
      e = tier == Tier::kCgroup ? registry_->spawn(group, std::move(req), &call)
                                : registry_->spawn_tier(tier, helper, std::move(req), &call);
    }
    Napi::Object out = Napi::Object::New(env);
    if (e) {
      out.Set("error", make_error(env, e));
      return out;
    }
    // The child has its copies now; ours would hold pipes open forever.
    for (auto& fd : stdio.child) fd.reset();
    callbacks_[call.id] = Napi::Persistent(info[1].As<Napi::Function>());
    out.Set("id", Napi::Number::New(env, static_cast<double>(call.id)));
    out.Set("pid", call.pid);
    out.Set("cgroup", call.cgroup);
    out.Set("tier", tier_name(tier));
    if (call.shim > 0) out.Set("shim", call.shim);
    out.Set("method", clone_method_name(call.method));
    Napi::Array fds = Napi::Array::New(env, 3);
    for (uint32_t i = 0; i < 3; ++i) fds.Set(i, stdio.parent[i] ? stdio.parent[i].release() : -1);
    out.Set("stdio", fds);
    return out;
  }

  Call* CallArg(const Napi::CallbackInfo& info) {
    if (!registry_ || info.Length() < 1 || !info[0].IsNumber()) return nullptr;
    return registry_->find(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()));
  }

  // terminate(id, graceMs, signal, reason) -> whether a cleanup event will come
  Napi::Value Terminate(const Napi::CallbackInfo& info) {
    Call* c = CallArg(info);
    if (!c || info.Length() < 4) return Napi::Boolean::New(info.Env(), false);
    bool reporting = c->terminate(info[1].As<Napi::Number>().Int32Value(),
                                  info[2].As<Napi::Number>().Int32Value(),
                                  info[3].As<Napi::String>().Utf8Value());
    return Napi::Boolean::New(info.Env(), reporting);
  }

  // kill(id, signal) -> how many processes got it
  Napi::Value Kill(const Napi::CallbackInfo& info) {
    Call* c = CallArg(info);
    if (!c || info.Length() < 2) return Napi::Number::New(info.Env(), 0);
    return Napi::Number::New(info.Env(), c->signal_all(info[1].As<Napi::Number>().Int32Value()));
  }

  Napi::Value Members(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Call* c = CallArg(info);
    std::vector<pid_t> pids;
    if (c) pids = c->members();
    Napi::Array a = Napi::Array::New(env, pids.size());
    for (size_t i = 0; i < pids.size(); ++i) a.Set(static_cast<uint32_t>(i), pids[i]);
    return a;
  }

  Napi::Value ProcessInfoOf(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Array out = Napi::Array::New(env);
    if (info.Length() < 1 || !info[0].IsArray()) return out;
    Napi::Array pids = info[0].As<Napi::Array>();
    uint32_t n = 0;
    for (uint32_t i = 0; i < pids.Length(); ++i) {
      ProcessInfo p;
      if (read_process_info(pids.Get(i).As<Napi::Number>().Int32Value(), &p)) {
        out.Set(n++, process_info_object(env, p));
      }
    }
    return out;
  }

  // pipe() -> [readFd, writeFd], both CLOEXEC: stdio pipes made before the
  // call starts (a queued call already has its streams).
  Napi::Value Pipe(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return ThrowSys(env, SysError::from_errno("pipe2"));
    Napi::Array a = Napi::Array::New(env, 2);
    a.Set(0u, p[0]);
    a.Set(1u, p[1]);
    return a;
  }

  // setRef(id, ref): whether the call keeps the event loop alive.
  Napi::Value SetRef(const Napi::CallbackInfo& info) {
    if (registry_ && info.Length() >= 2 && info[0].IsNumber()) {
      registry_->set_referenced(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()),
                                info[1].ToBoolean().Value());
    }
    return info.Env().Undefined();
  }

  Napi::Value CloseFd(const Napi::CallbackInfo& info) {
    if (info.Length() > 0 && info[0].IsNumber()) ::close(info[0].As<Napi::Number>().Int32Value());
    return info.Env().Undefined();
  }

  // subtreePrefix() -> "proctree-<pid>-<random>", the same in every worker.
  Napi::Value SubtreePrefix(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), subtree_prefix());
  }

  // ensureGuardian(helperPath, prefix) -> { pid, startedNow }
  Napi::Value EnsureGuardian(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!registry_) return ThrowSys(env, SysError::of(ECANCELED, "guardian"));
    if (info.Length() < 2 || !info[0].IsString() || !info[1].IsString()) {
      return ThrowType(env, "ensureGuardian(helperPath, prefix)");
    }
    CgroupLocation loc;
    if (SysError e = registry_->location(&loc)) return ThrowSys(env, e);
    GuardianInfo g;
    if (SysError e = ensure_guardian(info[0].As<Napi::String>().Utf8Value(), loc.own_path,
                                     info[1].As<Napi::String>().Utf8Value(), registry_->child_stack(),
                                     &g)) {
      return ThrowSys(env, e);
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("pid", g.pid);
    o.Set("startedNow", g.started_now);
    return o;
  }

  static Napi::Object probe_object(Napi::Env env, const Probe& p) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("ok", p.ok);
    if (!p.ok) {
      o.Set("errno", errno_name(p.err));
      if (p.syscall[0]) o.Set("syscall", p.syscall);
    }
    if (!p.detail.empty()) o.Set("detail", p.detail);
    return o;
  }

  // probe(helperPath) -> { location, probes: { name: { ok, errno?, syscall?, detail? } } }
  // Blocks for a few milliseconds (see probe.h); the facade caches it.
  Napi::Value ProbeHost(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!registry_) return ThrowSys(env, SysError::of(ECANCELED, "probe"));
    if (info.Length() < 1 || !info[0].IsString()) return ThrowType(env, "probe(helperPath)");
    HostProbes h = probe_host(info[0].As<Napi::String>().Utf8Value(), registry_->child_stack());
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
    probes.Set("freeze", probe_object(env, h.freeze));
    probes.Set("cgroupKill", probe_object(env, h.cgroup_kill));
    probes.Set("pidns", probe_object(env, h.pidns));
    probes.Set("userns", probe_object(env, h.userns));
    probes.Set("subreaper", probe_object(env, h.subreaper));
    probes.Set("helper", probe_object(env, h.helper));
    out.Set("probes", probes);
    return out;
  }

  // shutdown(waitMs): synchronous, for process 'exit'.
  Napi::Value Shutdown(const Napi::CallbackInfo& info) {
    int wait_ms = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : 2000;
    if (registry_) registry_->shutdown_sync(wait_ms);
    return info.Env().Undefined();
  }

  Napi::Env env_;
  Registry* registry_ = nullptr;
  napi_async_context async_context_ = nullptr;
  napi_async_cleanup_hook_handle async_hook_ = nullptr;
  std::unordered_map<uint64_t, Napi::FunctionReference> callbacks_;
};

}  // namespace
}  // namespace proctree

using ProctreeAddon = proctree::Addon;
NODE_API_ADDON(ProctreeAddon)
