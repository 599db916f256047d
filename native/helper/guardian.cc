#include "helper/guardian.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "kernel/cgroup.h"
#include "kernel/cgroup_sweep.h"
#include "kernel/fd.h"

namespace proctree {
namespace {

// The harness's pidfd, inherited at this fd when the kernel has pidfds.
constexpr int kHarnessPidfd = 3;

bool matches_prefix(const char* name, const std::string& prefix) {
  size_t n = prefix.size();
  if (strncmp(name, prefix.c_str(), n) != 0) return false;
  return name[n] == '\0' || name[n] == '-';
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

  return sweep_cgroups(&subtrees, wait_ms);
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
