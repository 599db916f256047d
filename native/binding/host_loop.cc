// Under Node, the reactor's descriptor is watched by Node's own event loop
// instead of a Waiter thread: one poll handle of libuv on the reactor's
// epoll descriptor, whose callback runs the Environment's turn on the
// JavaScript thread. That saves, per event, the Waiter's wake-up and the
// thread-safe function's hand-over (the harness's CPU per call).
//
// libuv is reached at run time (dlsym), never linked: the addon has no
// undefined uv_ symbol and still loads where libuv is absent or a stub that
// panics (Bun, Deno). There, and when PROCTREE_LOOP=thread asks for it, the
// Waiter thread and the thread-safe function do the same job.
//
// The few libuv entry points used are declared here by their C ABI, which
// libuv keeps stable within a major version (Node has shipped libuv 1.x since
// Node 0.12): a handle is opaque memory of uv_handle_size(UV_POLL) bytes
// whose first field is `void* data`.
#include <dlfcn.h>
#include <napi.h>
#include <stdlib.h>

#include <cstring>

#include "binding/addon.h"

// glibc 2.34 moved dlsym into libc under a new symbol version; bound to the
// old one (libdl's before 2.34, which Node itself loads), the addon needs no
// newer glibc than Node's own builds do, as in loop/thread.cc.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#if defined(__x86_64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
#endif
#endif

namespace proctree {
namespace binding {
namespace {

constexpr int kUvIdle = 6;      // UV_IDLE in uv_handle_type
constexpr int kUvPoll = 8;      // UV_POLL
constexpr int kUvReadable = 1;  // UV_READABLE

using PollCb = void (*)(void* handle, int status, int events);
using IdleCb = void (*)(void* handle);
using CloseCb = void (*)(void* handle);

struct HostUv {
  napi_status (*get_loop)(napi_env, void**) = nullptr;
  size_t (*handle_size)(int) = nullptr;
  int (*poll_init)(void*, void*, int) = nullptr;
  int (*poll_start)(void*, int, PollCb) = nullptr;
  int (*poll_stop)(void*) = nullptr;
  void (*unref)(void*) = nullptr;
  void (*close)(void*, CloseCb) = nullptr;
  int (*idle_init)(void*, void*) = nullptr;
  int (*idle_start)(void*, IdleCb) = nullptr;
  int (*idle_stop)(void*) = nullptr;
};

template <typename F>
bool find(const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  return *out != nullptr;
}

// The runtime's libuv, when this is Node (and not forbidden); null else.
const HostUv* host_uv(Napi::Env env) {
  const char* forced = getenv("PROCTREE_LOOP");
  if (forced != nullptr && strcmp(forced, "thread") == 0) return nullptr;
  // Bun and Deno export uv_ names too, as stubs: ask who we run in.
  Napi::Value process = env.Global().Get("process");
  if (env.IsExceptionPending() || !process.IsObject()) return nullptr;
  Napi::Value versions = process.As<Napi::Object>().Get("versions");
  if (env.IsExceptionPending() || !versions.IsObject()) return nullptr;
  Napi::Object v = versions.As<Napi::Object>();
  if (!v.Has("node") || !v.Has("uv") || v.Has("bun") || v.Has("deno") || env.IsExceptionPending()) return nullptr;
  static HostUv uv;
  static const bool found = find("napi_get_uv_event_loop", &uv.get_loop) &&
                            find("uv_handle_size", &uv.handle_size) && find("uv_poll_init", &uv.poll_init) &&
                            find("uv_poll_start", &uv.poll_start) && find("uv_poll_stop", &uv.poll_stop) &&
                            find("uv_unref", &uv.unref) && find("uv_close", &uv.close) &&
                            find("uv_idle_init", &uv.idle_init) && find("uv_idle_start", &uv.idle_start) &&
                            find("uv_idle_stop", &uv.idle_stop);
  return found ? &uv : nullptr;
}

void on_readable(void* handle, int /*status*/, int /*events*/) {
  // An error status (the descriptor failed) still runs the turn: the
  // reactor's own wait says what is wrong.
  Addon* self = *static_cast<Addon**>(handle);
  if (self) self->reactor_ready();
}

void on_idle(void* handle) {
  Addon* self = *static_cast<Addon**>(handle);
  if (self) self->idle_ready();
}

void free_handle(void* handle) { free(handle); }

// A handle of `type`, its `data` this addon, unreferenced; null on failure.
template <typename Init>
void* new_handle(const HostUv* uv, int type, Init init, Addon* self) {
  void* handle = calloc(1, uv->handle_size(type));
  if (handle == nullptr) return nullptr;
  if (!init(handle)) {
    free(handle);  // never initialised: not known to the loop
    return nullptr;
  }
  *static_cast<Addon**>(handle) = self;  // its `data`
  // Never what keeps the loop alive: keep_alive() says that.
  uv->unref(handle);
  return handle;
}

void close_handle(const HostUv* uv, void** handle) {
  if (*handle == nullptr) return;
  *static_cast<Addon**>(*handle) = nullptr;
  uv->close(*handle, free_handle);
  *handle = nullptr;
}

}  // namespace

bool Addon::watch_reactor(int fd, void (*ready)(void*), void* arg) {
  const HostUv* uv = host_uv(env_);
  if (uv == nullptr) return false;
  void* loop = nullptr;
  if (uv->get_loop(env_, &loop) != napi_ok || loop == nullptr) return false;
  void* handle = new_handle(uv, kUvPoll, [&](void* h) { return uv->poll_init(loop, h, fd) == 0; }, this);
  if (handle == nullptr) return false;
  void* idle = new_handle(uv, kUvIdle, [&](void* h) { return uv->idle_init(loop, h) == 0; }, this);
  if (idle == nullptr) {
    close_handle(uv, &handle);
    return false;
  }
  host_uv_ = uv;
  reactor_poll_ = handle;
  reactor_idle_ = idle;
  reactor_ready_ = ready;
  reactor_arg_ = arg;
  arm_reactor(true);
  return true;
}

void Addon::arm_reactor(bool armed) {
  if (!reactor_poll_ || armed == reactor_armed_) return;
  const HostUv* uv = static_cast<const HostUv*>(host_uv_);
  reactor_armed_ = (armed ? uv->poll_start(reactor_poll_, kUvReadable, on_readable) : uv->poll_stop(reactor_poll_)) == 0
                       ? armed
                       : reactor_armed_;
}

void Addon::unwatch_reactor() {
  if (!reactor_poll_) return;
  const HostUv* uv = static_cast<const HostUv*>(host_uv_);
  uv->poll_stop(reactor_poll_);
  uv->idle_stop(reactor_idle_);
  close_handle(uv, &reactor_poll_);
  close_handle(uv, &reactor_idle_);
  reactor_armed_ = false;
  idle_started_ = false;
}

bool Addon::turn_soon() {
  if (!reactor_idle_) return false;
  if (!idle_started_) {
    const HostUv* uv = static_cast<const HostUv*>(host_uv_);
    if (uv->idle_start(reactor_idle_, on_idle) != 0) return false;
    idle_started_ = true;
  }
  return true;
}

void Addon::reactor_ready() {
  if (reactor_ready_) reactor_ready_(reactor_arg_);
}

void Addon::idle_ready() {
  // Once: a turn_soon() asks for one turn.
  static_cast<const HostUv*>(host_uv_)->idle_stop(reactor_idle_);
  idle_started_ = false;
  reactor_ready();
}

}  // namespace binding
}  // namespace proctree
