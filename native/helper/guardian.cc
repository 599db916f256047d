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
    if (!CgroupDir::create(dir + "/" + e->d_name, true, &cg)) subtrees.push_back(std::move(cg));
  }
  closedir(d);
  if (subtrees.empty()) return 0;

  // One write per subtree kills every call inside it, whatever it forks.
  Fd ino(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  for (CgroupDir& cg : subtrees) {
    if (ino) inotify_add_watch(ino.get(), (cg.path() + "/cgroup.events").c_str(), IN_MODIFY);
    cg.write_file("cgroup.kill", "1");
  }
  uint64_t deadline = now_ms() + static_cast<uint64_t>(wait_ms);
  for (;;) {
    bool populated = false;
    for (CgroupDir& cg : subtrees) {
      CgroupEvents ev;
      if (!cg.read_events(&ev) && ev.populated) populated = true;
    }
    uint64_t now = now_ms();
    if (!populated || now >= deadline || !ino) break;
    pollfd pfd{ino.get(), POLLIN, 0};
    poll(&pfd, 1, static_cast<int>(deadline - now));
    char buf[4096];
    while (read(ino.get(), buf, sizeof buf) > 0) {
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
  char buf[64];
  for (;;) {
    ssize_t n = read(0, buf, sizeof buf);
    if (n == 0) break;  // EOF: every copy of the write end is gone
    if (n < 0 && errno != EINTR) break;
  }
  kill_and_remove_subtrees(cgroup_dir, prefix, 5000);
  return 0;
}

}  // namespace proctree
