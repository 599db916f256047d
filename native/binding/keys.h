// Property names and constant strings that cross into JavaScript on every
// call (spawn()'s spec and result, the 'empty' event's usage), made once per
// environment. Napi::Object::Get("name") and Set("name", ...) make their key
// from the C string each time, which V8 then hashes and looks up in its
// string table: a few µs of the harness's CPU per call.
#pragma once

#include <napi.h>

#include <array>

namespace proctree {
namespace binding {

// X(enumerator, "text")
#define PROCTREE_KEYS(X)                 \
  X(kArgv, "argv")                       \
  X(kCandidates, "candidates")           \
  X(kCgroup, "cgroup")                   \
  X(kCols, "cols")                       \
  X(kCpu, "cpu")                         \
  X(kCwd, "cwd")                         \
  X(kDefer, "defer")                     \
  X(kEnv, "env")                         \
  X(kError, "error")                     \
  X(kExecPending, "execPending")         \
  X(kGid, "gid")                         \
  X(kGroup, "group")                     \
  X(kGroupLimits, "groupLimits")         \
  X(kGuardianError, "guardianError")     \
  X(kHelper, "helper")                   \
  X(kId, "id")                           \
  X(kLimits, "limits")                   \
  X(kMemoryBytes, "memoryBytes")         \
  X(kMemoryPeakBytes, "memoryPeakBytes") \
  X(kMethod, "method")                   \
  X(kOomKilled, "oomKilled")             \
  X(kPeakProcesses, "peakProcesses")     \
  X(kPending, "pending")                 \
  X(kPid, "pid")                         \
  X(kPids, "pids")                       \
  X(kPidsLimited, "pidsLimited")         \
  X(kPidsPeak, "pidsPeak")               \
  X(kPty, "pty")                         \
  X(kPtyMaster, "ptyMaster")             \
  X(kRows, "rows")                       \
  X(kSeal, "seal")                       \
  X(kSource, "source")                   \
  X(kStdio, "stdio")                     \
  X(kSystemMs, "systemMs")               \
  X(kTier, "tier")                       \
  X(kUid, "uid")                         \
  X(kUserMs, "userMs")                   \
  X(kVerified, "verified")

class Keys {
 public:
#define PROCTREE_KEY_ENUM(name, text) name,
  enum Name { PROCTREE_KEYS(PROCTREE_KEY_ENUM) kCount };
#undef PROCTREE_KEY_ENUM

  // Once, in the addon's constructor.
  void init(Napi::Env env);
  // The key as a JavaScript string. Also a constant string asked for
  // often (a tier's "verified", a clone method's name) by its text: made
  // on its first ask, reused after.
  napi_value operator[](Name name) const;
  napi_value text(Napi::Env env, const char* s);

 private:
  // Strings cannot be referenced before Node-API 10: they live in one
  // array, which is referenced (an element read is one call into the
  // engine).
  Napi::Reference<Napi::Array> strings_;
  // The constant strings' texts, by their index in strings_ (kCount + i).
  std::array<const char*, 16> texts_{};
  size_t n_texts_ = 0;
};

}  // namespace binding
}  // namespace proctree
