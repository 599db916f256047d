// Events delivered to JavaScript (Addon's EventSink): a call's events to its
// onEvent, a stream's to its own, a ports() answer to its onDone, each
// through napi_make_callback with the addon's async context. A listener that
// throws is an uncaught exception of the harness, never swallowed here.
#include <napi.h>

#include <utility>
#include <vector>

#include "binding/addon.h"
#include "binding/errors.h"
#include "binding/values.h"
#include "kernel/sockets.h"

namespace proctree {
namespace binding {

void Addon::deliver(const CallEvent& ev) {
  if (ev.kind == CallEvent::kOutput || ev.kind == CallEvent::kOutputEnd || ev.kind == CallEvent::kWritten) {
    deliver_stream(ev);
    return;
  }
  if (ev.kind == CallEvent::kPorts) {
    deliver_ports(ev);
    return;
  }
  auto it = callbacks_.find(ev.call_id);
  if (it == callbacks_.end()) return;
  Napi::HandleScope scope(env_);
  Napi::Function fn = it->second.Value();
  napi_value argv[3];
  size_t argc = 0;
  auto add = [&](napi_value v) { argv[argc++] = v; };
  add(Napi::Number::New(env_, ev.kind));
  switch (ev.kind) {
    case CallEvent::kExit:
      add(ev.exit.code >= 0 ? Napi::Number::New(env_, ev.exit.code) : env_.Null());
      add(Napi::Number::New(env_, ev.exit.signal));
      break;
    case CallEvent::kCleanup:
      add(report_object(env_, ev.report));
      break;
    case CallEvent::kError:
    case CallEvent::kStartFailed:
      add(make_error(env_, ev.error));
      break;
    case CallEvent::kStarted:
      add(Napi::Number::New(env_, ev.pid));
      if (!ev.cgroup.empty()) add(Napi::String::New(env_, ev.cgroup));
      break;
    case CallEvent::kEmpty: {
      Napi::Object u = Napi::Object::New(env_);
      u.Set(keys_[Keys::kPeakProcesses], ev.peak_processes);
      if (ev.usage.known) {
        u.Set(keys_[Keys::kUserMs], ev.usage.user_ms);
        u.Set(keys_[Keys::kSystemMs], ev.usage.system_ms);
        u.Set(keys_[Keys::kSource], keys_.text(env_, ev.usage.source));
        if (ev.usage.memory_peak >= 0) u.Set(keys_[Keys::kMemoryPeakBytes], static_cast<double>(ev.usage.memory_peak));
        if (ev.usage.pids_peak >= 0) u.Set(keys_[Keys::kPidsPeak], static_cast<double>(ev.usage.pids_peak));
        if (ev.usage.oom_killed) u.Set(keys_[Keys::kOomKilled], true);
        if (ev.usage.pids_limited) u.Set(keys_[Keys::kPidsLimited], true);
      }
      add(u);
      break;
    }
    case CallEvent::kFrozen:
      add(Napi::Boolean::New(env_, ev.frozen));
      break;
    case CallEvent::kOutput:
    case CallEvent::kOutputEnd:
    case CallEvent::kWritten:
    case CallEvent::kPorts:
      return;  // deliver_stream(), deliver_ports()
  }
  napi_value result;
  napi_status st = napi_make_callback(env_, async_context_, receiver(), fn, argc, argv, &result);
  if (ev.kind == CallEvent::kEmpty) callbacks_.erase(ev.call_id);
  if (st == napi_pending_exception) rethrow_uncaught();
}

// The `this` of an event's callback. Every callback is bound or an arrow
// function, so it is never read: the global object, not a new object per
// event.
napi_value Addon::receiver() {
  napi_value global = nullptr;
  napi_get_global(env_, &global);
  return global;
}

// A listener threw: that is an uncaught exception of the harness, as it
// would be for a ChildProcess listener, never swallowed here.
void Addon::rethrow_uncaught() {
  napi_value exc;
  napi_get_and_clear_last_exception(env_, &exc);
  napi_fatal_exception(env_, exc);
}

// A stream's event (loop/streams.h) as onEvent(kind, value): 0, a chunk
// read (Buffer); 1, the end of reading (null, or the read's error); 2, a
// write is in the pipe (null, or the write's error). Raw napi calls,
// checked: while a worker is being terminated they fail, and the wrappers
// would turn that into a fatal error.
void Addon::deliver_stream(const CallEvent& ev) {
  auto it = pipe_callbacks_.find(ev.call_id);
  if (it == pipe_callbacks_.end()) return;
  Napi::HandleScope scope(env_);
  napi_value fn = it->second.Value();
  napi_value args[2] = {nullptr, nullptr};
  napi_value recv = nullptr;
  int kind = ev.kind == CallEvent::kOutput ? 0 : ev.kind == CallEvent::kOutputEnd ? 1 : 2;
  napi_status st = napi_create_int32(env_, kind, &args[0]);
  if (st == napi_ok) {
    if (ev.kind == CallEvent::kOutput) {
      st = napi_create_buffer_copy(env_, ev.data.size(), ev.data.data(), nullptr, &args[1]);
    } else if (ev.error) {
      args[1] = make_error(env_, ev.error);
    } else {
      st = napi_get_null(env_, &args[1]);
    }
  }
  if (st == napi_ok) recv = receiver();
  // A stream closed at its end (only read) has no more events.
  if (ev.kind == CallEvent::kOutputEnd && (!env_state_ || !env_state_->streams().exists(ev.call_id))) {
    pipe_callbacks_.erase(it);
  }
  if (st != napi_ok) return;
  napi_value result;
  st = napi_make_callback(env_, async_context_, recv, fn, 2, args, &result);
  // The next chunk may be read once this one is JavaScript's.
  if (ev.kind == CallEvent::kOutput && env_state_) env_state_->streams().delivered(ev.call_id);
  if (st == napi_pending_exception) rethrow_uncaught();
}

// The answer to ports(): onDone(error, null) or onDone(null, [{ protocol,
// address, port, pid }]). Raw napi calls, checked, as in deliver_stream.
void Addon::deliver_ports(const CallEvent& ev) {
  auto it = ports_callbacks_.find(ev.call_id);
  if (it == ports_callbacks_.end()) return;
  Napi::FunctionReference fn_ref = std::move(it->second);
  ports_callbacks_.erase(it);
  Napi::HandleScope scope(env_);
  napi_value args[2] = {nullptr, nullptr};
  napi_value recv = nullptr;
  napi_status st = napi_ok;
  if (ev.error) {
    args[0] = make_error(env_, ev.error);
    st = napi_get_null(env_, &args[1]);
  } else if (ev.described) {
    st = napi_get_null(env_, &args[0]);
    if (st == napi_ok) st = napi_create_array_with_length(env_, ev.infos.size(), &args[1]);
    for (size_t i = 0; st == napi_ok && i < ev.infos.size(); ++i) {
      Napi::Object o = process_info_object(env_, ev.infos[i]);
      st = o.IsEmpty() ? napi_generic_failure : napi_set_element(env_, args[1], static_cast<uint32_t>(i), o);
    }
  } else {
    st = napi_get_null(env_, &args[0]);
    if (st == napi_ok) st = napi_create_array_with_length(env_, ev.listeners.size(), &args[1]);
    for (size_t i = 0; st == napi_ok && i < ev.listeners.size(); ++i) {
      const Listener& l = ev.listeners[i];
      napi_value o, v;
      st = napi_create_object(env_, &o);
      if (st == napi_ok) st = napi_create_string_utf8(env_, listener_protocol_name(l.protocol), NAPI_AUTO_LENGTH, &v);
      if (st == napi_ok) st = napi_set_named_property(env_, o, "protocol", v);
      if (st == napi_ok) st = napi_create_string_utf8(env_, l.address.data(), l.address.size(), &v);
      if (st == napi_ok) st = napi_set_named_property(env_, o, "address", v);
      if (st == napi_ok) st = napi_create_int32(env_, l.port, &v);
      if (st == napi_ok) st = napi_set_named_property(env_, o, "port", v);
      if (st == napi_ok) st = napi_create_int32(env_, l.pid, &v);
      if (st == napi_ok) st = napi_set_named_property(env_, o, "pid", v);
      if (st == napi_ok) st = napi_set_element(env_, args[1], static_cast<uint32_t>(i), o);
    }
  }
  if (st == napi_ok) recv = receiver();
  if (st != napi_ok) return;
  napi_value result;
  st = napi_make_callback(env_, async_context_, recv, fn_ref.Value(), 2, args, &result);
  if (st == napi_pending_exception) rethrow_uncaught();
}

}  // namespace binding
}  // namespace proctree
