#include "helper/broker.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernel/broker_protocol.h"
#include "kernel/cgroup.h"
#include "kernel/cgroup_sweep.h"
#include "kernel/fd.h"
#include "kernel/pidfd.h"
#include "kernel/procfs.h"
#include "kernel/spawn.h"
#include "kernel/stdio_fds.h"

namespace proctree {
namespace {

using broker::Header;
using broker::SpawnMessage;

struct Broker {
  std::string scope;   // absolute path of the delegated scope
  bool has_cgroup_kill = false;
  Fd harness;          // pidfd of the harness
  Fd signals;          // signalfd: SIGCHLD, and the signals that end the broker
  ChildStack stack;
  std::map<pid_t, uint64_t> calls;  // main process -> request id, until reaped
  uint64_t leaves_made = 0;
  std::vector<char> buf;
};

// One packet, and at most one descriptor. Blocking: a harness that does not
// read stalls only itself, and a dead one makes this fail with EPIPE.
void send_packet(const std::vector<char>& bytes, int fd = -1) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  while (sendmsg(broker::kSocketFd, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

void send_error(uint32_t kind, uint64_t id, const SysError& e) {
  send_packet(broker::encode_reply(kind, id, e.err, 0, 0, e.syscall, e.path));
}

// The harness is the process argv names, not a later one with its pid: a
// pidfd opened first, then the start time read, can only be the harness's
// if that start time is the one the harness passed (it was alive when it
// started us, so its pid was not free to reuse before the pidfd was open).
SysError open_harness(const char* pid_arg, const char* start_arg, Fd* out) {
  pid_t pid = static_cast<pid_t>(strtol(pid_arg, nullptr, 10));
  uint64_t expected = strtoull(start_arg, nullptr, 10);
  if (pid <= 0) return SysError::of(EINVAL, "broker", pid_arg);
  Fd fd = pidfd_open(pid);
  if (!fd) return SysError::from_errno("pidfd_open", pid_arg);
  ProcessInfo info;
  if (!read_process_stat(pid, &info) || info.start_time != expected) {
    return SysError::of(ESRCH, "pidfd_open", pid_arg);
  }
  *out = std::move(fd);
  return SysError::none();
}

// Our cgroup is the scope systemd made; we move into <scope>/broker so that
// the scope holds only cgroups. Only a process already inside may do this:
// the common ancestor of the source and target is the scope, writable by us.
SysError enter_own_leaf(Broker* b) {
  CgroupLocation loc;
  if (SysError e = locate_cgroup2(&loc)) return e;
  b->scope = loc.own_path;
  CgroupDir leaf;
  if (SysError e = CgroupDir::create(b->scope + "/broker", false, &leaf)) return e;
  if (SysError e = leaf.write_file("cgroup.procs", "0")) {
    leaf.remove();
    return e;
  }
  b->has_cgroup_kill = leaf.has_kill();
  return SysError::none();
}

// The one place the broker starts a process (kernel/spawn.h): straight into
// the call's leaf, in a session of its own, with the harness's stdio.
// The received descriptors are above 2 and close-on-exec (MSG_CMSG_CLOEXEC),
// as SpawnRequest::fds wants them.
SysError start_call(Broker& b, const SpawnMessage& m, const int (&stdio)[3], const CgroupDir& leaf,
                    SpawnResult* out) {
  SpawnRequest req;
  req.candidates = m.candidates;
  req.argv = m.argv;
  req.envp = m.envp;
  req.cwd = m.cwd;
  req.fds.assign(stdio, stdio + 3);
  req.cgroup_dir = leaf.dir_fd();
  req.new_session = (m.flags & broker::kNewSession) != 0;
  req.controlling_tty = (m.flags & broker::kControllingTty) != 0;
  return spawn_process(req, b.stack, out);
}

void handle_spawn(Broker& b, const SpawnMessage& m, std::vector<Fd>& fds) {
  int stdio[3];
  size_t next = 0;
  for (int i = 0; i < 3; ++i) {
    if (m.flags & (1u << i)) {
      if (next >= fds.size()) return send_error(broker::kSpawnFailed, m.id, SysError::of(EPROTO, "broker"));
      stdio[i] = fds[next++].get();
    } else {
      stdio[i] = dev_null_fd();
      if (stdio[i] < 0) return send_error(broker::kSpawnFailed, m.id, SysError::from_errno("open", "/dev/null"));
    }
  }
  if (next != fds.size()) return send_error(broker::kSpawnFailed, m.id, SysError::of(EPROTO, "broker"));

  std::string name = m.leaf.empty() ? "call-" + std::to_string(++b.leaves_made) : m.leaf;
  if (!broker::valid_leaf(name)) return send_error(broker::kSpawnFailed, m.id, SysError::of(EINVAL, "mkdir", name));
  // Exclusive: two calls never share a leaf, and a leaf the harness still
  // has to clean up is never reused.
  CgroupDir leaf;
  if (SysError e = CgroupDir::create(b.scope + "/" + name, false, &leaf)) {
    return send_error(broker::kSpawnFailed, m.id, e);
  }
  SpawnResult r;
  if (SysError e = start_call(b, m, stdio, leaf, &r)) {
    leaf.remove();
    return send_error(broker::kSpawnFailed, m.id, e);
  }
  b.calls[r.pid] = m.id;
  send_packet(broker::encode_reply(broker::kSpawned, m.id, r.pid, 0, 0, leaf.path()), r.pidfd.get());
}

// Reads one request. false: the harness closed its end (or is gone).
bool receive_request(Broker& b) {
  std::vector<Fd> fds;
  bool truncated = false;
  ssize_t n = broker::receive_packet(broker::kSocketFd, b.buf.data(), b.buf.size(), &fds, &truncated);
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (n == 0) return false;
  SpawnMessage m;
  Header h{};
  if (static_cast<size_t>(n) >= sizeof h) memcpy(&h, b.buf.data(), sizeof h);
  if (truncated) {
    send_error(broker::kSpawnFailed, h.id, SysError::of(EMSGSIZE, "broker"));
    return true;
  }
  if (SysError e = broker::decode_spawn(b.buf.data(), static_cast<size_t>(n), &m)) {
    send_error(broker::kSpawnFailed, h.id, e);
    return true;
  }
  handle_spawn(b, m, fds);
  return true;
}

// Reaps every child that exited; a call's main process gets its kExited.
void reap(Broker& b, bool report) {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    auto it = b.calls.find(pid);
    if (it == b.calls.end()) continue;
    if (report) {
      int32_t code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      int32_t sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      send_packet(broker::encode_reply(broker::kExited, it->second, code, sig, 0, {}));
    }
    b.calls.erase(it);
  }
}

std::vector<std::string> leaves_of(const std::string& scope) {
  std::vector<std::string> out;
  DIR* d = opendir(scope.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    // Only . and .. are not leaves: a call may have made ".x" beside its own
    // leaf and moved into it.
    if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
        strcmp(e->d_name, "broker") == 0)
      continue;
    out.push_back(scope + "/" + e->d_name);
  }
  closedir(d);
  return out;
}

// The harness is gone: nothing it started may outlive it. Every leaf is
// killed until empty, then removed.
void kill_every_leaf(Broker& b) {
  std::vector<CgroupDir> dirs;
  for (const std::string& path : leaves_of(b.scope)) {
    CgroupDir d;
    if (!CgroupDir::open_existing(path, &d)) dirs.push_back(std::move(d));
  }
  sweep_cgroups(&dirs, 5000, [&b] { reap(b, false); });
}

SysError setup(Broker* b, int argc, char** argv) {
  // argv: <harness-pid> <harness-start-time>
  if (argc != 2) return SysError::of(EINVAL, "broker", "usage");
  int type = 0;
  socklen_t len = sizeof type;
  if (getsockopt(broker::kSocketFd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) {
    return SysError::of(ENOTSOCK, "broker", "fd 3");
  }
  fcntl(broker::kSocketFd, F_SETFD, FD_CLOEXEC);
  if (SysError e = open_harness(argv[0], argv[1], &b->harness)) return e;
  if (SysError e = enter_own_leaf(b)) return e;
  if (dev_null_fd() < 0) return SysError::from_errno("open", "/dev/null");

  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, sig);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  b->signals.reset(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!b->signals) return SysError::from_errno("signalfd");
  b->buf.resize(broker::kMaxMessage);
  // Not to hold the harness's working directory (and its mount) busy.
  if (chdir("/") != 0) return SysError::from_errno("chdir", "/");
  return SysError::none();
}

}  // namespace

int broker_main(int argc, char** argv) {
  prctl(PR_SET_NAME, "proctree-broker", 0, 0, 0);
  Broker b;
  if (SysError e = setup(&b, argc, argv)) {
    send_error(broker::kSetupFailed, 0, e);
    fprintf(stderr, "proctree-helper broker: %s %s: %s\n", e.syscall, e.path.c_str(), strerror(e.err));
    return 1;
  }
  // The harness read systemd-run's errors on our stderr until now; from
  // here nothing is written there, and its pipe sees EOF.
  dup2(dev_null_fd(), 1);
  dup2(dev_null_fd(), 2);
  send_packet(broker::encode_reply(broker::kReady, 0, getpid(), 0, b.has_cgroup_kill ? uint32_t{broker::kHasCgroupKill} : 0u,
                                   b.scope));

  for (;;) {
    pollfd fds[3] = {{broker::kSocketFd, POLLIN, 0}, {b.harness.get(), POLLIN, 0}, {b.signals.get(), POLLIN, 0}};
    int r = poll(fds, 3, -1);
    if (r < 0 && errno != EINTR) break;
    bool stop = false;
    if (fds[2].revents) {
      signalfd_siginfo si;
      while (read(b.signals.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        if (si.ssi_signo != SIGCHLD) stop = true;  // systemd stopping the scope, or a person
      }
      reap(b, true);
    }
    // The harness's pidfd turns readable when it exits, however it died.
    if (fds[1].revents) stop = true;
    if (fds[0].revents & POLLIN) {
      if (!receive_request(b)) stop = true;
    } else if (fds[0].revents & (POLLHUP | POLLERR)) {
      stop = true;
    }
    if (stop) break;
  }
  kill_every_leaf(b);
  return 0;
}

}  // namespace proctree
