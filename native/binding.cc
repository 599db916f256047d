// The addon's entry, and the only files that know about N-API are this one
// and binding/: turns the Environment (loop/) of each Node environment (main
// thread or worker) into a JavaScript object, runs its turns through a
// thread-safe function (the Environment's Waiter thread calls it; nothing of
// libuv: Node, Bun and Deno all have Node-API), and delivers call events
// through napi_make_callback with the addon's async context. Here: module
// init, the export table, the loop's thread-safe function, teardown; the
// exported functions themselves live in binding/ by concern (binding/addon.h).
#include <napi.h>

#include "binding/addon.h"

namespace proctree {
namespace binding {
namespace {

// What a call of the thread-safe function asks for.
void* const kTurn = reinterpret_cast<void*>(1);
void* const kDeliver = reinterpret_cast<void*>(2);

}  // namespace

Addon::Addon(Napi::Env env, Napi::Object exports) : env_(env) {
  keys_.init(env);
  DefineAddon(exports, {
                           InstanceMethod("spawn", &Addon::Spawn),
                           InstanceMethod("terminate", &Addon::Terminate),
                           InstanceMethod("terminateGroup", &Addon::TerminateGroup),
                           InstanceMethod("kill", &Addon::Kill),
                           InstanceMethod("members", &Addon::Members),
                           InstanceMethod("ports", &Addon::Ports),
                           InstanceMethod("processInfo", &Addon::ProcessInfoOf),
                           InstanceMethod("describe", &Addon::Describe),
                           InstanceMethod("shutdown", &Addon::Shutdown),
                           InstanceMethod("pipe", &Addon::Pipe),
                           InstanceMethod("streamOpen", &Addon::StreamOpen),
                           InstanceMethod("streamAdopt", &Addon::StreamAdopt),
                           InstanceMethod("streamRead", &Addon::StreamRead),
                           InstanceMethod("streamWrite", &Addon::StreamWrite),
                           InstanceMethod("streamShutdown", &Addon::StreamShutdown),
                           InstanceMethod("streamEnd", &Addon::StreamEnd),
                           InstanceMethod("streamClose", &Addon::StreamClose),
                           InstanceMethod("streamRef", &Addon::StreamRef),
                           InstanceMethod("setRef", &Addon::SetRef),
                           InstanceMethod("retire", &Addon::Retire),
                           InstanceMethod("settle", &Addon::Settle),
                           InstanceMethod("streamBacklog", &Addon::StreamBacklog),
                           InstanceMethod("closeFd", &Addon::CloseFd),
                           InstanceMethod("ptyResize", &Addon::PtyResize),
                           InstanceMethod("cgroup2Hierarchies", &Addon::Cgroup2Hierarchies),
                           InstanceMethod("cgroupMembers", &Addon::CgroupMembers),
                           InstanceMethod("ptyForeground", &Addon::PtyForeground),
                           InstanceMethod("subtreePrefix", &Addon::SubtreePrefix),
                           InstanceMethod("probe", &Addon::ProbeHost),
                           // Pause and resume; limits (kernel/limits.h).
                           InstanceMethod("pause", &Addon::Pause),
                           InstanceMethod("limitsProbe", &Addon::LimitsProbe),
                       });
  napi_value resource_name = Napi::String::New(env, "proctree:call");
  napi_async_init(env, nullptr, resource_name, &async_context_);
  // The Environment's turns: called from its Waiter thread (kTurn) and
  // from this thread (kDeliver); unreferenced until a call or an event
  // needs the loop (keep_alive).
  napi_value loop_name = Napi::String::New(env, "proctree:loop");
  if (napi_create_threadsafe_function(env, nullptr, nullptr, loop_name, 0, 1, nullptr, nullptr, this, CallJs,
                                      &tsfn_) == napi_ok) {
    napi_unref_threadsafe_function(env, tsfn_);
    env_state_ = new Environment(this, this);
  }
  // Synchronous: everything is killed, the threads are joined, before the
  // environment (a worker's, or the process's at exit) goes.
  napi_add_env_cleanup_hook(env, SyncCleanup, this);
}

Addon::~Addon() {
  // The cleanup hook has run already, unless the process is exiting.
  Teardown(0);
}

// LoopHost: kTurn from the Waiter's thread, the rest on this thread.
void Addon::wake() { napi_call_threadsafe_function(tsfn_, kTurn, napi_tsfn_nonblocking); }

void Addon::deliver_later() {
  if (tsfn_) napi_call_threadsafe_function(tsfn_, kDeliver, napi_tsfn_nonblocking);
}

void Addon::keep_alive(bool alive) {
  if (!tsfn_) return;
  if (alive) {
    napi_ref_threadsafe_function(env_, tsfn_);
  } else {
    napi_unref_threadsafe_function(env_, tsfn_);
  }
}

// On the JavaScript thread; env is null when the function is being torn
// down with calls still queued (nothing to run then).
void Addon::CallJs(napi_env env, napi_value /*js_callback*/, void* context, void* data) {
  if (env == nullptr) return;
  Addon* self = static_cast<Addon*>(context);
  if (!self->env_state_) return;
  if (data == kTurn) {
    self->env_state_->turn();
  } else {
    self->env_state_->deliver_next();
  }
}

void Addon::SyncCleanup(void* arg) { static_cast<Addon*>(arg)->Teardown(2000); }

void Addon::Teardown(int wait_ms) {
  Environment* reg = env_state_;
  if (!reg) return;
  callbacks_.clear();
  pipe_callbacks_.clear();
  ports_callbacks_.clear();
  reg->shutdown_sync(wait_ms);
  // Joins the Waiter: no call of the thread-safe function after this.
  reg->close();
  env_state_ = nullptr;
  delete reg;
  napi_release_threadsafe_function(tsfn_, napi_tsfn_abort);
  tsfn_ = nullptr;
}

}  // namespace binding
}  // namespace proctree

using ProctreeAddon = proctree::binding::Addon;
NODE_API_ADDON(ProctreeAddon)
