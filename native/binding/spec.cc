// Reading spawn()'s spec (spec.h): strings, stdio entries, the tier, limits.
#include "binding/spec.h"

#include <napi.h>

#include <algorithm>
#include <string>

#include "kernel/limits.h"

namespace proctree {
namespace binding {
namespace {

// A string's UTF-8: one call into the engine where it fits a buffer on the
// stack (Utf8Value() always makes two, the length and then the copy). False
// for a value that is not a string.
bool utf8(napi_env env, napi_value v, std::string* out) {
  char buf[512];
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, buf, sizeof buf, &len) != napi_ok) return false;
  if (len + 1 < sizeof buf) {
    out->assign(buf, len);
    return true;
  }
  if (napi_get_value_string_utf8(env, v, nullptr, 0, &len) != napi_ok) return false;
  out->resize(len);
  return napi_get_value_string_utf8(env, v, &(*out)[0], len + 1, &len) == napi_ok;
}

bool read_strings(Napi::Value v, std::vector<std::string>* out) {
  if (!v.IsArray()) return false;
  Napi::Array a = v.As<Napi::Array>();
  const uint32_t n = a.Length();
  out->clear();
  out->resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    Napi::Value item = a.Get(i);
    if (!utf8(item.Env(), item, &(*out)[i])) return false;
  }
  return true;
}

// stdio: N >= 3 entries, each 'pipe' | 'ignore' | 'inherit' | 'close' |
// 'pty' | a descriptor number.
bool read_stdio(Napi::Value v, std::vector<StdioSpec>* spec) {
  if (!v.IsArray() || v.As<Napi::Array>().Length() < 3) return false;
  Napi::Array a = v.As<Napi::Array>();
  const uint32_t n = a.Length();
  spec->assign(n, StdioSpec{});
  for (uint32_t i = 0; i < n; ++i) {
    Napi::Value item = a.Get(i);
    StdioSpec& one = (*spec)[i];
    if (item.IsNumber()) {
      one.kind = StdioSpec::kFd;
      one.fd = item.As<Napi::Number>().Int32Value();
      if (one.fd < 0) return false;
      continue;
    }
    std::string s;
    if (!utf8(item.Env(), item, &s)) return false;
    if (s == "pipe") {
      one.kind = StdioSpec::kPipe;
    } else if (s == "ignore") {
      one.kind = StdioSpec::kIgnore;
    } else if (s == "inherit") {
      one.kind = StdioSpec::kInherit;
    } else if (s == "close") {
      one.kind = StdioSpec::kClose;
    } else if (s == "pty") {
      if (i > 2) return false;
      one.kind = StdioSpec::kPty;
    } else {
      return false;
    }
  }
  return true;
}

// tier: 'cgroup' (also when absent) | 'systemd' | 'pidns' | 'subreaper' |
// 'pgroup'.
bool read_tier(Napi::Value v, Tier* tier) {
  std::string t = "cgroup";
  if (v.IsString() && !utf8(v.Env(), v, &t)) return false;
  if (t == "cgroup") {
    *tier = Tier::kCgroup;
  } else if (t == "systemd") {
    *tier = Tier::kSystemd;
  } else if (t == "pidns") {
    *tier = Tier::kPidns;
  } else if (t == "subreaper") {
    *tier = Tier::kSubreaper;
  } else if (t == "pgroup") {
    *tier = Tier::kPgroup;
  } else {
    return false;
  }
  return true;
}

// { memoryBytes?, pids?, cpu? } (validated by the facade): absent or 0 is no limit.
bool read_limits(Napi::Value v, const Keys& keys, Limits* out) {
  *out = Limits{};
  if (v.IsUndefined() || v.IsNull()) return true;
  if (!v.IsObject()) return false;
  Napi::Object o = v.As<Napi::Object>();
  Napi::Value mem = o.Get(keys[Keys::kMemoryBytes]);
  Napi::Value pids = o.Get(keys[Keys::kPids]);
  Napi::Value cpu = o.Get(keys[Keys::kCpu]);
  if (mem.IsNumber()) out->memory_bytes = static_cast<uint64_t>(std::max(0.0, mem.As<Napi::Number>().DoubleValue()));
  if (pids.IsNumber()) out->pids = static_cast<uint64_t>(std::max(0.0, pids.As<Napi::Number>().DoubleValue()));
  if (cpu.IsNumber()) out->cpu = cpu.As<Napi::Number>().DoubleValue();
  return true;
}

}  // namespace

const char* read_spawn_spec(Napi::Object spec, const Keys& keys, SpawnSpec* out) {
  SpawnRequest& req = out->req;
  SpawnOptions& opts = out->opts;
  Napi::Value group = spec.Get(keys[Keys::kGroup]);
  if (!utf8(group.Env(), group, &opts.group)) return "spec.group";
  if (!read_strings(spec.Get(keys[Keys::kCandidates]), &req.candidates)) return "spec.candidates";
  if (!read_strings(spec.Get(keys[Keys::kArgv]), &req.argv)) return "spec.argv";
  Napi::Value envv = spec.Get(keys[Keys::kEnv]);
  if (envv.IsNull() || envv.IsUndefined()) {
    req.inherit_env = true;
  } else if (!read_strings(envv, &req.envp)) {
    return "spec.env";
  }
  Napi::Value cwd = spec.Get(keys[Keys::kCwd]);
  if (cwd.IsString() && !utf8(cwd.Env(), cwd, &req.cwd)) return "spec.cwd";
  Napi::Value uid = spec.Get(keys[Keys::kUid]);
  if (uid.IsNumber()) {
    req.set_uid = true;
    req.uid = uid.As<Napi::Number>().Uint32Value();
  }
  Napi::Value gid = spec.Get(keys[Keys::kGid]);
  if (gid.IsNumber()) {
    req.set_gid = true;
    req.gid = gid.As<Napi::Number>().Uint32Value();
  }
  if (!read_stdio(spec.Get(keys[Keys::kStdio]), &out->stdio)) return "spec.stdio";
  Napi::Value ptyv = spec.Get(keys[Keys::kPty]);
  if (ptyv.IsObject()) {
    Napi::Object p = ptyv.As<Napi::Object>();
    out->pty.cols = static_cast<unsigned short>(p.Get(keys[Keys::kCols]).As<Napi::Number>().Uint32Value());
    out->pty.rows = static_cast<unsigned short>(p.Get(keys[Keys::kRows]).As<Napi::Number>().Uint32Value());
  }
  if (!read_tier(spec.Get(keys[Keys::kTier]), &opts.tier)) return "spec.tier";
  // Each Get is a call into the engine: every field is read once.
  Napi::Value helper = spec.Get(keys[Keys::kHelper]);
  if (helper.IsString() && !utf8(helper.Env(), helper, &opts.helper)) return "spec.helper";
  Napi::Value seal = spec.Get(keys[Keys::kSeal]);
  opts.seal = seal.IsBoolean() && seal.As<Napi::Boolean>().Value();
  Napi::Value defer = spec.Get(keys[Keys::kDefer]);
  opts.defer = defer.IsBoolean() && defer.As<Napi::Boolean>().Value();
  if (!read_limits(spec.Get(keys[Keys::kLimits]), keys, &opts.limits.call)) return "spec.limits";
  if (!read_limits(spec.Get(keys[Keys::kGroupLimits]), keys, &opts.limits.group)) return "spec.groupLimits";
  return nullptr;
}

}  // namespace binding
}  // namespace proctree
