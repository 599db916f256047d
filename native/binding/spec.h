// Reading spawn()'s spec, a JavaScript object, into what loop/environment
// takes: the command (SpawnRequest), where and how it runs (SpawnOptions),
// its stdio entries and terminal size.
#pragma once

#include <napi.h>

#include "binding/keys.h"

#include <vector>

#include "kernel/spawn.h"
#include "kernel/stdio_fds.h"
#include "loop/environment.h"

namespace proctree {
namespace binding {

struct SpawnSpec {
  SpawnRequest req;
  SpawnOptions opts;
  std::vector<StdioSpec> stdio;
  PtySize pty;
};

// { group, candidates, argv, env, cwd?, stdio, pty?, uid?, gid?, tier,
// helper }: nullptr once read, or the name of the first field that is wrong
// ("spec.argv"), for a TypeError. env null: the command gets this process's
// own environment.
const char* read_spawn_spec(Napi::Object spec, const Keys& keys, SpawnSpec* out);

}  // namespace binding
}  // namespace proctree
