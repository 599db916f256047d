// Errors at the N-API boundary: a SysError (errno, syscall, path) becomes an
// Error that reads like Node's (code = the errno name, errno, syscall, path);
// bad arguments become a TypeError. Nothing here throws a C++ exception: the
// throw_* functions set a pending JavaScript exception and return undefined.
#pragma once

#include <napi.h>

#include "kernel/sys_error.h"

namespace proctree {
namespace binding {

Napi::Object make_error(Napi::Env env, const SysError& e);
// The JavaScript exception pending: make_error(e), or a TypeError(message).
Napi::Value throw_sys(Napi::Env env, const SysError& e);
Napi::Value throw_type(Napi::Env env, const char* message);

}  // namespace binding
}  // namespace proctree
