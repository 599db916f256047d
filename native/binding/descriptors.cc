// Descriptors JavaScript hands to calls: pipe() for stdio made before a call
// starts, the addon's own streams (loop/streams.h: read and written on the
// addon's loop, delivered as events), and terminals (resize, foreground
// group).
#include <napi.h>

#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "binding/addon.h"
#include "binding/errors.h"
#include "kernel/fd.h"
#include "kernel/pty.h"

namespace proctree {
namespace binding {
namespace {

uint64_t stream_id(const Napi::CallbackInfo& info) {
  return info.Length() > 0 && info[0].IsNumber() ? static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()) : 0;
}

}  // namespace

// pipe() -> [readFd, writeFd], both CLOEXEC: stdio pipes made before the
// call starts (a queued call already has its streams).
Napi::Value Addon::Pipe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return throw_sys(env, SysError::from_errno("pipe2"));
  Napi::Array a = Napi::Array::New(env, 2);
  a.Set(0u, p[0]);
  a.Set(1u, p[1]);
  return a;
}

// streamOpen(kind, onEvent) -> [id, childFd, ourFd]: a pipe (a socketpair
// for kind 3) whose end the addon reads or writes (loop/streams.h): kind
// 0 run()'s output, 1 the child writes, 2 the child reads, 3 both. The
// child's end (close-on-exec) is the child's stdio entry; ourFd is for
// ioctls and for handing it to another call, never to read or close.
Napi::Value Addon::StreamOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsFunction()) return throw_type(env, "streamOpen(kind, onEvent)");
  int kind = info[0].As<Napi::Number>().Int32Value();
  if (kind < Streams::kOutput || kind > Streams::kDuplex) return throw_type(env, "streamOpen(kind, onEvent)");
  if (!env_state_) return throw_sys(env, SysError::of(ECANCELED, "pipe2"));
  uint64_t id = 0;
  Fd child_end;
  int our_fd = -1;
  if (SysError e = env_state_->streams().open(static_cast<Streams::Kind>(kind), &id, &child_end, &our_fd)) {
    return throw_sys(env, e);
  }
  pipe_callbacks_[id] = Napi::Persistent(info[1].As<Napi::Function>());
  Napi::Array a = Napi::Array::New(env, 3);
  a.Set(0u, Napi::Number::New(env, static_cast<double>(id)));
  a.Set(1u, child_end.release());
  a.Set(2u, our_fd);
  return a;
}

// streamAdopt(fd, onEvent) -> id: a pty master, the addon's from now on
// (closed by it, also when this throws).
Napi::Value Addon::StreamAdopt(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsFunction()) return throw_type(env, "streamAdopt(fd, onEvent)");
  Fd fd(info[0].As<Napi::Number>().Int32Value());
  if (!env_state_) return throw_sys(env, SysError::of(ECANCELED, "fcntl"));
  uint64_t id = 0;
  if (SysError e = env_state_->streams().adopt(std::move(fd), &id)) return throw_sys(env, e);
  pipe_callbacks_[id] = Napi::Persistent(info[1].As<Napi::Function>());
  return Napi::Number::New(env, static_cast<double>(id));
}

// streamRead(id, reading): JavaScript wants chunks, or has enough for now.
Napi::Value Addon::StreamRead(const Napi::CallbackInfo& info) {
  if (env_state_ && info.Length() > 1) {
    if (info[1].ToBoolean().Value()) {
      env_state_->streams().read_start(stream_id(info));
    } else {
      env_state_->streams().read_stop(stream_id(info));
    }
  }
  return info.Env().Undefined();
}

// streamWrite(id, buffer) -> false (all in the pipe), true (an event 2
// will say), or the error (EPIPE…): nothing was or will be written.
Napi::Value Addon::StreamWrite(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[1].IsBuffer()) return throw_type(env, "streamWrite(id, buffer)");
  if (!env_state_) return make_error(env, SysError::of(EBADF, "write"));
  Napi::Buffer<char> buf = info[1].As<Napi::Buffer<char>>();
  bool queued = false;
  if (SysError e = env_state_->streams().write(stream_id(info), buf.Data(), buf.Length(), &queued)) {
    return make_error(env, e);
  }
  return Napi::Boolean::New(env, queued);
}

// streamShutdown(id) -> undefined, or the error: no more writes.
Napi::Value Addon::StreamShutdown(const Napi::CallbackInfo& info) {
  if (env_state_) {
    if (SysError e = env_state_->streams().shutdown(stream_id(info))) return make_error(info.Env(), e);
  }
  return info.Env().Undefined();
}

// streamEnd(id): stop waiting for EOF; what the pipe holds now still
// comes, then the end, on a later turn.
Napi::Value Addon::StreamEnd(const Napi::CallbackInfo& info) {
  if (env_state_) env_state_->streams().finish(stream_id(info));
  return info.Env().Undefined();
}

// streamBacklog(id) -> [bytes, endFollows]: what JavaScript has yet to get
// of a stream it reads (Streams::backlog): the bytes in the pipe and in a
// chunk on its way, and whether its end follows them. Blocks on nothing.
Napi::Value Addon::StreamBacklog(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  size_t bytes = 0;
  bool end_follows = false;
  if (env_state_) env_state_->streams().backlog(stream_id(info), &bytes, &end_follows);
  Napi::Array a = Napi::Array::New(env, 2);
  a.Set(0u, Napi::Number::New(env, static_cast<double>(bytes)));
  a.Set(1u, Napi::Boolean::New(env, end_follows));
  return a;
}

// streamClose(id): closed now, no more events.
Napi::Value Addon::StreamClose(const Napi::CallbackInfo& info) {
  uint64_t id = stream_id(info);
  if (env_state_) env_state_->streams().close(id);
  pipe_callbacks_.erase(id);
  return info.Env().Undefined();
}

// streamRef(id, ref): whether the stream keeps the loop alive while it
// reads or writes.
Napi::Value Addon::StreamRef(const Napi::CallbackInfo& info) {
  if (env_state_ && info.Length() > 1) env_state_->streams().set_ref(stream_id(info), info[1].ToBoolean().Value());
  return info.Env().Undefined();
}

Napi::Value Addon::CloseFd(const Napi::CallbackInfo& info) {
  if (info.Length() > 0 && info[0].IsNumber()) ::close(info[0].As<Napi::Number>().Int32Value());
  return info.Env().Undefined();
}

// ptyResize(masterFd, cols, rows): TIOCSWINSZ (the foreground process
// group gets SIGWINCH).
Napi::Value Addon::PtyResize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) {
    return throw_type(env, "ptyResize(fd, cols, rows)");
  }
  if (SysError e = resize_pty(info[0].As<Napi::Number>().Int32Value(),
                              static_cast<unsigned short>(info[1].As<Napi::Number>().Uint32Value()),
                              static_cast<unsigned short>(info[2].As<Napi::Number>().Uint32Value()))) {
    return throw_sys(env, e);
  }
  return env.Undefined();
}

// ptyForeground(masterFd) -> the terminal's foreground process group, or -1.
Napi::Value Addon::PtyForeground(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsNumber()) return Napi::Number::New(info.Env(), -1);
  return Napi::Number::New(info.Env(), pty_foreground(info[0].As<Napi::Number>().Int32Value()));
}

}  // namespace binding
}  // namespace proctree
