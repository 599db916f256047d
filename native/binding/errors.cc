// Errors at the N-API boundary (errors.h): errno -> a Node-style Error.
#include "binding/errors.h"

#include <napi.h>

#include <string>

#include "loop/errno_name.h"

namespace proctree {
namespace binding {

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

Napi::Value throw_sys(Napi::Env env, const SysError& e) {
  napi_throw(env, make_error(env, e));
  return env.Undefined();
}

Napi::Value throw_type(Napi::Env env, const char* message) {
  Napi::TypeError::New(env, message).ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace binding
}  // namespace proctree
