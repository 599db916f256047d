// Killing whole cgroups until they are empty, for the helpers that outlive
// the harness (the guardian, the broker): one kill round each, then a wait
// for `populated 0` on all of them, with more rounds where the kernel has no
// cgroup.kill, then rmdir. napi-free and uv-free, like the rest of kernel/.
#pragma once

#include <functional>
#include <vector>

#include "kernel/cgroup.h"

namespace proctree {

// Waits at most wait_ms for the directories to empty: woken by inotify on
// their cgroup.events, and re-reading them at least every 10 ms (the kernel
// notifies at most once per ~10 ms, and inotify may be missing). between()
// runs on every wake-up (the broker reaps its children there). Returns how
// many directories were removed.
int sweep_cgroups(std::vector<CgroupDir>* dirs, int wait_ms, const std::function<void()>& between = {});

}  // namespace proctree
