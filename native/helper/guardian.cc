#include "helper/guardian.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "kernel/cgroup.h"
#include "kernel/fd.h"

namespace proctree {
namespace {

// The harness's pidfd, inherited at this fd when the kernel has pidfds.
constexpr int kHarnessPidfd = 3;
// Between SIGKILL rounds on kernels without cgroup.kill.
constexpr int kRoundMs = 20;

bool matches_prefix(const char* name, const std::string& prefix) {
  size_t n = prefix.size();
  if (strncmp(name, prefix.c_str(), n) != 0) return false;
  return name[n] == '\0' || name[n] == '-';
}

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

}  // namespace

int kill_and_remove_subtrees(const std::string& dir, const std::string& prefix, int wait_ms) {
  std::vector<CgroupDir> subtrees;
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    if (e->d_type != DT_DIR || !matches_prefix(e->d_name, prefix)) continue;
    CgroupDir cg;
    if (!CgroupDir::open_existing(dir + "/" + e->d_name, &cg)) subtrees.push_back(std::move(cg));
  }
  closedir(d);
  if (subtrees.empty()) return 0;

  // One cgroup.kill per subtree kills every call inside it, whatever it
  // forks; without cgroup.kill (< 5.14), freeze + SIGKILL rounds (the same
  // routine the ladder uses) until nothing is left.
  Fd ino(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  for (CgroupDir& cg : subtrees) {
    if (ino) inotify_add_watch(ino.get(), (cg.path() + "/cgroup.events").c_str(), IN_MODIFY);
  }
  uint64_t deadline = now_ms() + static_cast<uint64_t>(wait_ms);
  bool one_shot = true;
  for (CgroupDir& cg : subtrees) {
    one_shot = one_shot && cg.has_kill();
    cg.kill_round();
  }
  for (;;) {
    bool populated = false;
    for (CgroupDir& cg : subtrees) {
      CgroupEvents ev;
      if (!cg.read_events(&ev) && ev.populated) populated = true;
    }
    uint64_t now = now_ms();
    if (!populated || now >= deadline) break;
    int wait = static_cast<int>(deadline - now);
    if (!one_shot && wait > kRoundMs) wait = kRoundMs;
    pollfd pfd{ino.get(), POLLIN, 0};
    poll(&pfd, ino ? 1 : 0, wait);
    char buf[4096];
    while (ino && read(ino.get(), buf, sizeof buf) > 0) {
    }
    if (!one_shot) {
      for (CgroupDir& cg : subtrees) cg.kill_round();
    }
  }
  int removed = 0;
  for (CgroupDir& cg : subtrees) {
    if (!cg.remove()) ++removed;
  }
  return removed;
}

int guardian_main(const char* cgroup_dir, const char* prefix) {
  prctl(PR_SET_NAME, "proctree-guard", 0, 0, 0);
  // Watch the harness itself (its pidfd turns readable when it exits) and
  // the pipe (EOF when every copy of its write end is gone). Either means
  // the harness is gone.
  bool have_pidfd = fcntl(kHarnessPidfd, F_GETFD) >= 0;
  for (;;) {
    pollfd fds[2] = {{0, POLLIN, 0}, {have_pidfd ? kHarnessPidfd : -1, POLLIN, 0}};
    int r = poll(fds, 2, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents) break;
    if (fds[0].revents) {
      char buf[64];
      ssize_t n = read(0, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
    }
  }
  kill_and_remove_subtrees(cgroup_dir, prefix, 5000);
  return 0;
}

}  // namespace proctree
