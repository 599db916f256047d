#include "kernel/guardian_launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "kernel/fd.h"
#include "kernel/pidfd.h"
#include "kernel/spawn.h"
#include "kernel/stdio_fds.h"

namespace proctree {
namespace {

// Process-wide, not per environment: one guardian per harness process, and
// its pipe's write end stays open (close-on-exec) for as long as we live.
std::mutex g_guardian_mutex;
pid_t g_guardian_pid = -1;
int g_guardian_pipe = -1;
int g_guardian_pidfd = -1;

std::string make_subtree_prefix() {
  unsigned char bytes[6] = {0};
  ssize_t n;
  do {
    n = getrandom(bytes, sizeof bytes, GRND_NONBLOCK);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof bytes)) {
    // Early boot without entropy, or a seccomp filter: the clock still makes
    // a name that no earlier process with this pid had.
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t v = static_cast<uint64_t>(ts.tv_sec) * 1000000007ull ^ static_cast<uint64_t>(ts.tv_nsec);
    for (unsigned char& b : bytes) {
      b = static_cast<unsigned char>(v);
      v >>= 8;
    }
  }
  char hex[sizeof bytes * 2 + 1];
  for (size_t i = 0; i < sizeof bytes; ++i) snprintf(hex + 2 * i, 3, "%02x", bytes[i]);
  return "proctree-" + std::to_string(getpid()) + "-" + hex;
}

// Whether the guardian we started is still running. Only its pidfd turning
// readable means it exited: a signal arriving while we look (EINTR) must not
// be taken for its death, or we would close its pipe and it would kill every
// call of the harness.
bool guardian_alive() {
  pollfd p{g_guardian_pidfd, POLLIN, 0};
  int r;
  do {
    r = poll(&p, 1, 0);
  } while (r < 0 && errno == EINTR);
  return !(r > 0 && (p.revents & (POLLIN | POLLHUP)));
}

}  // namespace

const std::string& subtree_prefix() {
  static const std::string prefix = make_subtree_prefix();
  return prefix;
}

SysError ensure_guardian(const std::string& helper, const std::string& cgroup_dir, const std::string& prefix,
                         ChildStack& stack, GuardianInfo* out) {
  std::lock_guard<std::mutex> lock(g_guardian_mutex);
  if (g_guardian_pid > 0) {
    if (guardian_alive()) {
      out->pid = g_guardian_pid;
      out->started_now = false;
      return SysError::none();
    }
    // Someone killed it: reap it and start a new one.
    ExitStatus st;
    pidfd_reap(g_guardian_pidfd, &st);
    close(g_guardian_pidfd);
    close(g_guardian_pipe);
    g_guardian_pid = -1;
  }
  // The guardian watches us by a pidfd of ours, which nothing else holds or
  // can fake; on kernels without pidfds, by EOF on a pipe whose write end
  // only we hold.
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return SysError::from_errno("pipe2");
  Fd read_end(p[0]), write_end(p[1]);
  Fd self = pidfd_open(getpid());
  std::vector<StdioSpec> spec(4);
  spec[0] = {StdioSpec::kFd, read_end.get()};
  spec[1].kind = StdioSpec::kIgnore;
  spec[2].kind = StdioSpec::kIgnore;
  spec[3] = self ? StdioSpec{StdioSpec::kFd, self.get()} : StdioSpec{StdioSpec::kClose, -1};
  PreparedStdio io;
  if (SysError e = prepare_stdio(spec, PtySize{}, &io)) return e;

  SpawnRequest req;
  req.candidates = {helper};
  req.argv = {helper, "guardian", cgroup_dir, prefix};
  req.inherit_env = true;
  req.fds = io.fds;
  req.shell_fallback = false;
  // Not in any call cgroup: the guardian must outlive the subtrees it kills.
  SpawnResult res;
  if (SysError e = spawn_process(req, stack, &res)) {
    if (std::string(e.syscall) == "execve") e.path = helper;
    return e;
  }
  g_guardian_pid = res.pid;
  g_guardian_pidfd = res.pidfd.release();
  g_guardian_pipe = write_end.release();
  out->pid = g_guardian_pid;
  out->started_now = true;
  return SysError::none();
}

}  // namespace proctree
