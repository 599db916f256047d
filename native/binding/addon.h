// The addon object of one Node environment (main thread or worker): the
// functions it exports to JavaScript, the callbacks JavaScript gave it, and
// the Environment (loop/) it runs. Its members are defined by concern:
//   ../binding.cc  module init, the export table, the thread-safe function
//                  that runs the Environment's turns, teardown
//   events.cc      call, stream and ports events delivered to JavaScript
//   calls.cc       spawn and what acts on a call (terminate, kill, settle...)
//   descriptors.cc pipes, the addon's streams, terminals
//   queries.cc     questions about trees and the host (members, ports, probe...)
//   host_loop.cc   under Node, its event loop watches the reactor (no Waiter)
// with what they share: spec.h (spawn()'s spec read), errors.h (errno ->
// Node-style Error), values.h (JavaScript objects of native reports), keys.h
// (property names made once).
#pragma once

#include <napi.h>

#include <cstdint>
#include <unordered_map>

#include "binding/keys.h"
#include "loop/environment.h"

namespace proctree {
namespace binding {

class Addon : public Napi::Addon<Addon>, public EventSink, public LoopHost {
 public:
  Addon(Napi::Env env, Napi::Object exports);
  ~Addon() override;

  // LoopHost: wake() from the Waiter's thread, the rest on this thread.
  void wake() override;
  void deliver_later() override;
  void keep_alive(bool alive) override;
  // The same, when Node's own loop watches the reactor (host_loop.cc).
  bool watch_reactor(int fd, void (*ready)(void*), void* arg) override;
  void unwatch_reactor() override;
  bool turn_soon() override;
  void reactor_ready();
  void idle_ready();

  // EventSink (events.cc).
  void deliver(const CallEvent& ev) override;

 private:
  // binding.cc: the loop and teardown.
  static void CallJs(napi_env env, napi_value js_callback, void* context, void* data);
  static void SyncCleanup(void* arg);
  void Teardown(int wait_ms);

  // events.cc
  void rethrow_uncaught();
  napi_value receiver();
  void deliver_stream(const CallEvent& ev);
  void deliver_ports(const CallEvent& ev);

  // calls.cc
  Call* CallArg(const Napi::CallbackInfo& info);
  Napi::Value Spawn(const Napi::CallbackInfo& info);
  Napi::Value Terminate(const Napi::CallbackInfo& info);
  Napi::Value TerminateGroup(const Napi::CallbackInfo& info);
  Napi::Value Kill(const Napi::CallbackInfo& info);
  Napi::Value SetRef(const Napi::CallbackInfo& info);
  Napi::Value Retire(const Napi::CallbackInfo& info);
  Napi::Value Settle(const Napi::CallbackInfo& info);
  Napi::Value Pause(const Napi::CallbackInfo& info);
  Napi::Value Shutdown(const Napi::CallbackInfo& info);

  // streams.cc
  Napi::Value Pipe(const Napi::CallbackInfo& info);
  Napi::Value StreamOpen(const Napi::CallbackInfo& info);
  Napi::Value StreamAdopt(const Napi::CallbackInfo& info);
  Napi::Value StreamRead(const Napi::CallbackInfo& info);
  Napi::Value StreamWrite(const Napi::CallbackInfo& info);
  Napi::Value StreamShutdown(const Napi::CallbackInfo& info);
  Napi::Value StreamEnd(const Napi::CallbackInfo& info);
  Napi::Value StreamClose(const Napi::CallbackInfo& info);
  Napi::Value StreamRef(const Napi::CallbackInfo& info);
  Napi::Value StreamBacklog(const Napi::CallbackInfo& info);
  Napi::Value CloseFd(const Napi::CallbackInfo& info);
  Napi::Value PtyResize(const Napi::CallbackInfo& info);
  Napi::Value PtyForeground(const Napi::CallbackInfo& info);

  // queries.cc
  Napi::Value Members(const Napi::CallbackInfo& info);
  Napi::Value Ports(const Napi::CallbackInfo& info);
  Napi::Value ProcessInfoOf(const Napi::CallbackInfo& info);
  Napi::Value Describe(const Napi::CallbackInfo& info);
  Napi::Value SubtreePrefix(const Napi::CallbackInfo& info);
  Napi::Value Cgroup2Hierarchies(const Napi::CallbackInfo& info);
  Napi::Value CgroupMembers(const Napi::CallbackInfo& info);
  Napi::Value ProbeHost(const Napi::CallbackInfo& info);
  Napi::Value LimitsProbe(const Napi::CallbackInfo& info);

  Napi::Env env_;
  Keys keys_;  // keys.h: the strings every call passes
  Environment* env_state_ = nullptr;
  napi_async_context async_context_ = nullptr;
  napi_threadsafe_function tsfn_ = nullptr;
  // host_loop.cc: Node's poll handle on the reactor, when it watches it.
  const void* host_uv_ = nullptr;
  void* reactor_poll_ = nullptr;
  void* reactor_idle_ = nullptr;
  bool idle_started_ = false;
  void (*reactor_ready_)(void*) = nullptr;
  void* reactor_arg_ = nullptr;
  std::unordered_map<uint64_t, Napi::FunctionReference> callbacks_;
  // Streams ids (their own numbering) -> onEvent, until the stream is closed.
  std::unordered_map<uint64_t, Napi::FunctionReference> pipe_callbacks_;
  // ports() requests -> onDone, until answered.
  std::unordered_map<uint64_t, Napi::FunctionReference> ports_callbacks_;
};

}  // namespace binding
}  // namespace proctree
