#include "kernel/broker_client.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernel/guardian_launch.h"
#include "kernel/procfs.h"
#include "kernel/stdio_fds.h"

namespace proctree {
namespace {

std::string working_directory() {
  char buf[PATH_MAX];
  return getcwd(buf, sizeof buf) ? std::string(buf) : std::string("/");
}

// The pid a pidfd refers to, numbered in our PID namespace ("Pid:" in its
// fdinfo); the broker's number is only right when we share its namespace.
pid_t pid_of_pidfd(int pidfd, pid_t fallback) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
  Fd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return fallback;
  char buf[1024];
  ssize_t n = read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return fallback;
  buf[n] = '\0';
  const char* p = strstr(buf, "\nPid:");
  if (!p) return fallback;
  long v = strtol(p + 5, nullptr, 10);
  return v > 0 ? static_cast<pid_t>(v) : fallback;
}

int64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

std::vector<std::string> systemd_run_wrapper(const std::string& systemd_run, const std::string& unit) {
  return {systemd_run, "--user", "--scope", "-p", "Delegate=yes", "--unit=" + unit, "--quiet", "--collect", "--"};
}

std::string broker_unit_name(const std::string& suffix) {
  return subtree_prefix() + (suffix.empty() ? "" : "-" + suffix) + ".scope";
}

SysError BrokerClient::start(const BrokerLaunch& launch, ChildStack& stack, BrokerClient* out) {
  ProcessInfo self;
  if (!read_process_stat(getpid(), &self)) return SysError::from_errno("open", "/proc/self/stat");

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) return SysError::from_errno("socketpair");
  Fd ours(sv[0]), theirs(sv[1]);
  // A spawn request with a large environment is one packet.
  int sndbuf = static_cast<int>(broker::kMaxMessage) + 4096;
  setsockopt(ours.get(), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  if (fcntl(ours.get(), F_SETFL, O_NONBLOCK) != 0) return SysError::from_errno("fcntl");

  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) return SysError::from_errno("pipe2");
  Fd err_read(err[0]), err_write(err[1]);
  fcntl(err_read.get(), F_SETFL, O_NONBLOCK);
  // 0, 1: /dev/null; 2: a pipe for systemd-run's errors; 3: the broker's
  // end of the socket (systemd-run keeps it open across its exec).
  std::vector<StdioSpec> spec(4);
  spec[0].kind = StdioSpec::kIgnore;
  spec[1].kind = StdioSpec::kIgnore;
  spec[2] = {StdioSpec::kFd, err_write.get()};
  spec[3] = {StdioSpec::kFd, theirs.get()};
  PreparedStdio io;
  if (SysError e = prepare_stdio(spec, PtySize{}, &io)) return e;

  SpawnRequest req;
  req.argv = launch.wrapper;
  req.argv.push_back(launch.helper);
  req.argv.push_back("broker");
  req.argv.push_back(std::to_string(getpid()));
  req.argv.push_back(std::to_string(self.start_time));
  req.candidates = {req.argv[0]};
  req.envp = launch.envp;
  req.inherit_env = launch.envp.empty();
  req.shell_fallback = false;
  req.fds = io.fds;
  req.cgroup_dir = launch.cgroup_dir;
  // No PR_SET_PDEATHSIG: when we die, the broker must live on long enough to
  // kill every call; it watches our pidfd instead.
  SpawnResult res;
  if (SysError e = spawn_process(req, stack, &res)) return e;

  BrokerClient c;
  c.sock_ = std::move(ours);
  c.process_ = std::move(res.pidfd);
  c.process_pid_ = res.pid;
  c.stderr_ = std::move(err_read);
  *out = std::move(c);
  return SysError::none();
}

SysError BrokerClient::send_spawn(const BrokerSpawn& spawn, uint64_t* id) {
  if (!sock_) return SysError::of(ENOTCONN, "broker");
  broker::SpawnMessage m;
  m.id = ++next_id_;
  m.leaf = spawn.leaf;
  m.cwd = spawn.cwd.empty() ? working_directory() : spawn.cwd;
  m.candidates = spawn.candidates;
  m.argv = spawn.argv;
  m.envp = spawn.envp;
  m.flags = spawn.new_session ? uint32_t{broker::kNewSession} : 0u;
  if (spawn.controlling_tty) m.flags |= broker::kControllingTty;
  Outgoing o;
  for (int i = 0; i < 3; ++i) {
    if (spawn.stdio[i] < 0) continue;
    Fd dup(fcntl(spawn.stdio[i], F_DUPFD_CLOEXEC, 3));
    if (!dup) return SysError::from_errno("fcntl");
    o.fds.push_back(std::move(dup));
    m.flags |= 1u << i;
  }
  if (SysError e = broker::encode_spawn(m, &o.bytes)) return e;
  queue_.push_back(std::move(o));
  *id = m.id;
  return flush();
}

SysError BrokerClient::flush() {
  while (!queue_.empty()) {
    Outgoing& o = queue_.front();
    iovec iov{o.bytes.data(), o.bytes.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * broker::kMaxFds)];
    if (!o.fds.empty()) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * o.fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * o.fds.size());
      for (size_t i = 0; i < o.fds.size(); ++i) {
        int fd = o.fds[i].get();
        memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof fd);
      }
    }
    ssize_t n = sendmsg(sock_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return SysError::none();
      return SysError::from_errno("sendmsg");
    }
    queue_.pop_front();  // closes our duplicates of the stdio fds
  }
  return SysError::none();
}

SysError BrokerClient::receive(BrokerEvent* out) {
  *out = BrokerEvent{};
  if (!sock_) {
    out->kind = BrokerEvent::kClosed;
    return SysError::none();
  }
  char buf[sizeof(broker::Header) + 2 * PATH_MAX + 64];
  std::vector<Fd> fds;
  ssize_t n = broker::receive_packet(sock_.get(), buf, sizeof buf, &fds, nullptr);
  if (n < 0 && errno == EAGAIN) return SysError::none();
  if (n < 0 && errno != ECONNRESET) return SysError::from_errno("recvmsg");
  if (n <= 0) {
    out->kind = BrokerEvent::kClosed;
    if (!ready_) {
      // Why it never got ready: systemd-run's message ("Failed to connect
      // to bus: No medium found"), the broker's own, or the exit status.
      std::string why = diagnostics();
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      out->error = SysError::of(ECONNREFUSED, "broker", why);
    }
    sock_.reset();
    return SysError::none();
  }
  broker::Reply r;
  if (SysError e = broker::decode_reply(buf, static_cast<size_t>(n), &r)) return e;
  out->id = r.header.id;
  switch (r.header.kind) {
    case broker::kReady:
      out->kind = BrokerEvent::kReady;
      out->pid = r.header.a;
      out->path = r.s1;
      out->cgroup_kill = (r.header.flags & broker::kHasCgroupKill) != 0;
      ready_ = true;
      scope_ = r.s1;
      diagnostics();
      stderr_.reset();
      break;
    case broker::kSetupFailed:
    case broker::kSpawnFailed: {
      out->kind = r.header.kind == broker::kSetupFailed ? BrokerEvent::kClosed : BrokerEvent::kSpawnFailed;
      // The syscall name must outlive the packet: map it to a static string
      // when it is one the broker can send, else "broker".
      // Every name the broker's setup and spawn can fail in (the child's
      // stages included), so the error keeps its syscall.
      static const char* const known[] = {"clone3", "clone",  "cgroup.procs", "setsid",  "dup2",       "ioctl",
                                          "chdir",  "execve", "prctl",        "mkdir",   "open",       "write",
                                          "read",   "rmdir",  "pidfd_open",   "signalfd", "broker",    "pipe2",
                                          "mmap",   "fcntl",  "uid_map",      "setuid",  "setgid",     "setgroups",
                                          "cgroup2", "poll",  "waitid",       "sendmsg", "recvmsg",   "socketpair"};
      const char* syscall = "broker";
      for (const char* k : known) {
        if (r.s1 == k) syscall = k;
      }
      out->error = SysError::of(r.header.a, syscall, r.s2);
      // The broker exits after kSetupFailed: this is the end.
      if (r.header.kind == broker::kSetupFailed) sock_.reset();
      break;
    }
    case broker::kSpawned:
      if (fds.empty()) return SysError::of(EPROTO, "broker");
      out->kind = BrokerEvent::kSpawned;
      out->pidfd = std::move(fds[0]);
      out->pid = pid_of_pidfd(out->pidfd.get(), r.header.a);
      out->path = r.s1;
      break;
    case broker::kExited:
      out->kind = BrokerEvent::kExited;
      out->status.done = true;
      out->status.code = r.header.a;
      out->status.signal = r.header.b;
      break;
    default:
      return SysError::of(EPROTO, "broker");
  }
  return SysError::none();
}

SysError BrokerClient::wait_ready(int timeout_ms, BrokerEvent* out) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    if (SysError e = receive(out)) return e;
    if (out->kind != BrokerEvent::kNone) return SysError::none();
    int64_t left = deadline - now_ms();
    if (left <= 0) return SysError::none();
    pollfd p{sock_.get(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR) return SysError::from_errno("poll");
  }
}

const std::string& BrokerClient::diagnostics() {
  char buf[1024];
  ssize_t n;
  while (stderr_ && (n = read(stderr_.get(), buf, sizeof buf)) > 0) {
    if (diagnostics_.size() < 8192) diagnostics_.append(buf, static_cast<size_t>(n));
  }
  return diagnostics_;
}

SysError BrokerClient::reap_process(ExitStatus* out) {
  *out = ExitStatus{};
  if (!process_) return SysError::none();
  if (SysError e = pidfd_reap(process_.get(), out)) return e;
  if (out->done) process_.reset();
  return SysError::none();
}

void BrokerClient::close() {
  sock_.reset();
  queue_.clear();
}

}  // namespace proctree
