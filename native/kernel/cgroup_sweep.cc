#include "kernel/cgroup_sweep.h"

#include <poll.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "kernel/fd.h"

namespace proctree {
namespace {

// The longest sleep between two reads of cgroup.events.
constexpr int kPollMs = 10;
// Between SIGKILL rounds on kernels without cgroup.kill.
constexpr int kRoundMs = 20;

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

bool any_populated(const std::vector<CgroupDir>& dirs) {
  for (const CgroupDir& d : dirs) {
    CgroupEvents ev;
    if (!d.read_events(&ev) && ev.populated) return true;
  }
  return false;
}

}  // namespace

int sweep_cgroups(std::vector<CgroupDir>* dirs, int wait_ms, const std::function<void()>& between) {
  Fd ino(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  // One cgroup.kill per directory kills everything below it, whatever it
  // forks; without one (< 5.14, or refused), freeze + SIGKILL rounds.
  bool one_shot = true;
  for (CgroupDir& d : *dirs) {
    if (ino) inotify_add_watch(ino.get(), (d.path() + "/cgroup.events").c_str(), IN_MODIFY);
    bool taken = false;
    d.kill_round(&taken);
    one_shot = one_shot && taken;
  }
  const uint64_t deadline = now_ms() + static_cast<uint64_t>(std::max(wait_ms, 0));
  uint64_t last_round = now_ms();
  for (;;) {
    if (between) between();
    uint64_t now = now_ms();
    if (!any_populated(*dirs) || now >= deadline) break;
    pollfd p{ino ? ino.get() : -1, POLLIN, 0};
    poll(&p, 1, static_cast<int>(std::min<uint64_t>(deadline - now, kPollMs)));
    char drain[4096];
    while (ino && read(ino.get(), drain, sizeof drain) > 0) {
    }
    if (!one_shot && now_ms() - last_round >= kRoundMs) {
      for (CgroupDir& d : *dirs) d.kill_round();
      last_round = now_ms();
    }
  }
  if (between) between();
  int removed = 0;
  for (CgroupDir& d : *dirs) {
    if (!d.remove()) ++removed;
  }
  return removed;
}

}  // namespace proctree
