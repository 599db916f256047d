// The systemd tier's broker (helper/broker.cc) and its harness side
// (kernel/broker_client.cc), without systemd: the test makes a cgroup of its
// own, as a delegated scope would be, and starts `proctree-helper broker`
// straight into it; everything else is the real thing (the broker's own
// leaf, one leaf per call, clone3 into it, pidfds and stdio over SCM_RIGHTS,
// the exit status from the broker, the kill when the harness dies).
// Outcomes are read from cgroup.procs, cgroup.events and /proc.
// PROCTREE_HELPER names the helper executable (ctest sets it).
#include "kernel/broker_client.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "fixtures.h"
#include "kernel/broker_protocol.h"
#include "kernel/cgroup.h"
#include "kernel/pidfd.h"
#include "kernel/systemd_probe.h"

using proctree::BrokerClient;
using proctree::BrokerEvent;
using proctree::BrokerLaunch;
using proctree::BrokerSpawn;
using proctree::CgroupDir;
using proctree::SysError;

extern char** environ;

namespace {

proctree::ChildStack& stack() {
  static proctree::ChildStack s;
  return s;
}

const char* helper() {
  const char* h = getenv("PROCTREE_HELPER");
  return h && *h ? h : nullptr;
}

std::string token() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return "300." + std::to_string(getpid()) + std::to_string(ts.tv_nsec % 1000000);
}

bool wait_until(bool (*cond)(const void*), const void* arg, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    if (cond(arg)) return true;
    usleep(10 * 1000);
  }
  return cond(arg);
}

std::vector<pid_t> procs_of(const std::string& path) {
  CgroupDir d;
  std::vector<pid_t> pids;
  if (CgroupDir::create(path, true, &d)) return pids;
  d.read_procs(&pids);
  return pids;
}

bool contains(const std::vector<pid_t>& v, pid_t pid) {
  for (pid_t p : v) {
    if (p == pid) return true;
  }
  return false;
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The scope stand-in: a cgroup of the test's own, removed at the end.
struct Scope {
  CgroupDir dir;
  std::string path;
  std::string why;
  Scope() { path = fixtures::make_test_cgroup(&dir, &why); }
  ~Scope() {
    if (!dir.valid()) return;
    // Kill and remove whatever a failed test left, leaves first.
    dir.write_file("cgroup.kill", "1");
    for (int i = 0; i < 200; ++i) {
      proctree::CgroupEvents ev;
      if (dir.read_events(&ev) || !ev.populated) break;
      usleep(10 * 1000);
    }
    dir.remove();
  }
};

SysError start_broker(const Scope& scope, BrokerClient* client, BrokerEvent* ready) {
  BrokerLaunch launch;
  launch.helper = helper();
  launch.cgroup_dir = scope.dir.dir_fd();
  if (SysError e = BrokerClient::start(launch, stack(), client)) return e;
  if (SysError e = client->wait_ready(5000, ready)) return e;
  if (ready->kind == BrokerEvent::kReady) return SysError::none();
  std::printf("     broker not ready: event %d, %s %s: %s\n", ready->kind, ready->error.syscall,
              ready->error.path.c_str(), strerror(ready->error.err));
  return ready->error.err ? ready->error : SysError::of(ETIMEDOUT, "broker");
}

BrokerSpawn command(std::vector<std::string> argv, const std::string& leaf = {}) {
  BrokerSpawn s;
  s.candidates = {argv[0]};
  s.argv = std::move(argv);
  s.envp = {"PATH=/usr/bin:/bin"};
  s.leaf = leaf;
  return s;
}

// Blocks until the next event of one of the kinds asked for (others are an error).
BrokerEvent next_event(BrokerClient& c, int timeout_ms = 5000) {
  BrokerEvent ev;
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    if (!c.receive(&ev) && ev.kind == BrokerEvent::kClosed) {
      proctree::ExitStatus st = fixtures::wait_exit(c.process_pidfd(), 2000);
      std::printf("     the broker is gone: exited %d, code %d, signal %d\n", st.done, st.code, st.signal);
    }
    if (ev.kind != BrokerEvent::kNone) return ev;
    pollfd p{c.socket_fd(), POLLIN, 0};
    poll(&p, 1, 10);
  }
  return ev;
}

#define NEED_BROKER(scope)                                  \
  do {                                                      \
    if (!helper()) SKIP("PROCTREE_HELPER is not set");      \
    if ((scope).path.empty()) SKIP((scope).why);            \
  } while (0)

}  // namespace

TEST(protocol_round_trip_and_leaf_names) {
  proctree::broker::SpawnMessage m;
  m.id = 42;
  m.leaf = "sub/call-1";
  m.cwd = "/tmp";
  m.candidates = {"/bin/sh"};
  m.argv = {"sh", "-c", "echo 'with spaces'"};
  m.envp = {"A=1", "B="};
  m.flags = proctree::broker::kNewSession | proctree::broker::kStdout;
  std::vector<char> bytes;
  CHECK_EQ(proctree::broker::encode_spawn(m, &bytes).err, 0);
  proctree::broker::SpawnMessage back;
  CHECK_EQ(proctree::broker::decode_spawn(bytes.data(), bytes.size(), &back).err, 0);
  CHECK_EQ(back.id, uint64_t{42});
  CHECK_EQ(back.leaf, m.leaf);
  CHECK_EQ(back.cwd, m.cwd);
  CHECK(back.argv == m.argv);
  CHECK(back.envp == m.envp);
  CHECK_EQ(back.flags, m.flags);
  // A cut packet is refused, not half-read.
  CHECK_EQ(proctree::broker::decode_spawn(bytes.data(), bytes.size() - 2, &back).err, EPROTO);
  m.envp.assign(1, std::string(proctree::broker::kMaxMessage, 'x'));
  CHECK_EQ(proctree::broker::encode_spawn(m, &bytes).err, E2BIG);

  CHECK(proctree::broker::valid_leaf("call-1"));
  CHECK(proctree::broker::valid_leaf("proctree-12-ab/call-3"));
  CHECK(!proctree::broker::valid_leaf(""));
  CHECK(!proctree::broker::valid_leaf("broker"));
  CHECK(!proctree::broker::valid_leaf("../escape"));
  CHECK(!proctree::broker::valid_leaf("a//b"));
  CHECK(!proctree::broker::valid_leaf("cgroup.procs"));
  CHECK(!proctree::broker::valid_leaf("a b"));

}

TEST(broker_moves_into_its_own_leaf_and_says_ready) {
  Scope scope;
  NEED_BROKER(scope);
  BrokerClient c;
  BrokerEvent ready;
  CHECK_EQ(start_broker(scope, &c, &ready).err, 0);
  CHECK_EQ(ready.kind, BrokerEvent::kReady);
  CHECK_EQ(ready.path, scope.path);
  CHECK(ready.cgroup_kill);
  CHECK(c.ready());
  // The scope itself holds no process; the broker sits in <scope>/broker.
  CHECK(procs_of(scope.path + "/broker") == std::vector<pid_t>{ready.pid});
  CHECK_EQ(ready.pid, c.process_pid());
  std::vector<pid_t> direct;
  scope.dir.read_procs(&direct);  // recursive: the broker only
  CHECK_EQ(direct.size(), size_t{1});
  c.close();
  // EOF: the broker exits; it is our child, reaped through its pidfd.
  proctree::ExitStatus st = fixtures::wait_exit(c.process_pidfd());
  CHECK(st.done);
  CHECK_EQ(st.code, 0);
}

TEST(a_call_starts_in_its_leaf_its_pidfd_works_and_its_exit_comes_back) {
  Scope scope;
  NEED_BROKER(scope);
  BrokerClient c;
  BrokerEvent ready;
  CHECK_EQ(start_broker(scope, &c, &ready).err, 0);
  std::string tok = token();
  uint64_t id = 0;
  CHECK_EQ(c.send_spawn(command({"/bin/sleep", tok}), &id).err, 0);
  BrokerEvent ev = next_event(c);
  CHECK_EQ(ev.kind, BrokerEvent::kSpawned);
  CHECK_EQ(ev.id, id);
  CHECK_EQ(ev.path, scope.path + "/call-1");
  CHECK(ev.pidfd.valid());
  // In the leaf from its first instruction, by the kernel's account.
  CHECK(procs_of(ev.path) == std::vector<pid_t>{ev.pid});
  std::string cg;
  CHECK(fixtures::pid_cgroup(ev.pid, &cg));
  CHECK(ev.path.size() > cg.size() && ev.path.compare(ev.path.size() - cg.size(), cg.size(), cg) == 0);
  // Its argv shows in /proc once exec has set up the new image, a moment
  // after the vfork parent resumed.
  for (int i = 0; i < 100 && !contains(fixtures::live_with(tok), ev.pid); ++i) usleep(10 * 1000);
  CHECK(contains(fixtures::live_with(tok), ev.pid));
  // The pidfd passed over the socket addresses the call.
  CHECK_EQ(proctree::pidfd_signal(ev.pidfd.get(), SIGTERM), 0);
  BrokerEvent exit = next_event(c);
  CHECK_EQ(exit.kind, BrokerEvent::kExited);
  CHECK_EQ(exit.id, id);
  CHECK_EQ(exit.status.code, -1);
  CHECK_EQ(exit.status.signal, SIGTERM);
  // The harness removes the leaf, as in the cgroup tier.
  CHECK_EQ(rmdir(ev.path.c_str()), 0);

  CHECK_EQ(c.send_spawn(command({"/bin/sh", "-c", "exit 7"}, "named"), &id).err, 0);
  ev = next_event(c);
  CHECK_EQ(ev.kind, BrokerEvent::kSpawned);
  CHECK_EQ(ev.path, scope.path + "/named");
  exit = next_event(c);
  CHECK_EQ(exit.kind, BrokerEvent::kExited);
  CHECK_EQ(exit.status.code, 7);
  CHECK_EQ(exit.status.signal, 0);
  CHECK_EQ(rmdir(ev.path.c_str()), 0);
  c.close();
  CHECK(fixtures::wait_exit(c.process_pidfd()).done);
}

TEST(stdio_passed_in_arrives_and_cwd_and_env_apply) {
  Scope scope;
  NEED_BROKER(scope);
  BrokerClient c;
  BrokerEvent ready;
  CHECK_EQ(start_broker(scope, &c, &ready).err, 0);
  int out[2], err[2];
  CHECK_EQ(pipe2(out, O_CLOEXEC), 0);
  CHECK_EQ(pipe2(err, O_CLOEXEC), 0);
  BrokerSpawn s = command({"/bin/sh", "-c", "echo \"$PROCTREE_X $(pwd)\"; echo oops >&2; read x; echo \"in=$x\""});
  s.envp.push_back("PROCTREE_X=hello");
  s.cwd = "/proc";
  s.stdio[1] = out[1];
  s.stdio[2] = err[1];
  uint64_t id;
  CHECK_EQ(c.send_spawn(s, &id).err, 0);
  // Our copies can go at once: the request holds its own until sent.
  close(out[1]);
  close(err[1]);
  BrokerEvent ev = next_event(c);
  CHECK_EQ(ev.kind, BrokerEvent::kSpawned);
  BrokerEvent exit = next_event(c);
  CHECK_EQ(exit.kind, BrokerEvent::kExited);
  char buf[256];
  ssize_t n = read(out[0], buf, sizeof buf - 1);
  CHECK(n > 0);
  buf[n] = '\0';
  // stdin was not passed: /dev/null in the broker, so `read` got EOF.
  CHECK_EQ(std::string(buf), std::string("hello /proc\nin=\n"));
  n = read(err[0], buf, sizeof buf - 1);
  CHECK(n > 0);
  buf[n] = '\0';
  CHECK_EQ(std::string(buf), std::string("oops\n"));
  close(out[0]);
  close(err[0]);
  rmdir(ev.path.c_str());
  c.close();
  fixtures::wait_exit(c.process_pidfd());
}

TEST(a_burst_of_requests_queues_without_blocking_and_all_complete) {
  Scope scope;
  NEED_BROKER(scope);
  BrokerClient c;
  BrokerEvent ready;
  CHECK_EQ(start_broker(scope, &c, &ready).err, 0);
  // More requests than a unix socket queues (net.unix.max_dgram_qlen, 10 by
  // default), each with a 100 KiB environment: send_spawn never blocks, the
  // rest waits in the client until the socket is writable again.
  const int n = 40;
  std::string big = "PROCTREE_BIG=" + std::string(100 * 1024, 'x');
  bool queued = false;
  for (int i = 0; i < n; ++i) {
    BrokerSpawn s = command({"/bin/sh", "-c", "test ${#PROCTREE_BIG} -eq 102400"});
    s.envp.push_back(big);
    uint64_t id;
    CHECK_EQ(c.send_spawn(s, &id).err, 0);
    CHECK_EQ(id, static_cast<uint64_t>(i + 1));
    if (c.wants_write()) queued = true;
  }
  CHECK(queued);
  int spawned = 0, exited = 0, ok = 0;
  for (int rounds = 0; rounds < 5000 && exited < n; ++rounds) {
    pollfd p{c.socket_fd(), static_cast<short>(POLLIN | (c.wants_write() ? POLLOUT : 0)), 0};
    poll(&p, 1, 100);
    if (p.revents & POLLOUT) CHECK_EQ(c.flush().err, 0);
    BrokerEvent ev;
    while (!c.receive(&ev) && ev.kind != BrokerEvent::kNone) {
      if (ev.kind == BrokerEvent::kSpawned) {
        ++spawned;
        rmdir(ev.path.c_str());  // may still be populated: removed below otherwise
      } else if (ev.kind == BrokerEvent::kExited) {
        ++exited;
        if (ev.status.code == 0) ++ok;
      } else {
        CHECK(false);
      }
    }
  }
  CHECK_EQ(spawned, n);
  CHECK_EQ(exited, n);
  // Every command saw the whole environment.
  CHECK_EQ(ok, n);
  CHECK(!c.wants_write());
  for (int i = 1; i <= n; ++i) rmdir((scope.path + "/call-" + std::to_string(i)).c_str());
  c.close();
  fixtures::wait_exit(c.process_pidfd());
}

TEST(spawn_errors_come_back_and_leave_no_leaf) {
  Scope scope;
  NEED_BROKER(scope);
  BrokerClient c;
  BrokerEvent ready;
  CHECK_EQ(start_broker(scope, &c, &ready).err, 0);
  uint64_t id;
  CHECK_EQ(c.send_spawn(command({"/nonexistent/proctree-no-such-command"}, "missing"), &id).err, 0);
  BrokerEvent ev = next_event(c);
  CHECK_EQ(ev.kind, BrokerEvent::kSpawnFailed);
  CHECK_EQ(ev.id, id);
  CHECK_EQ(ev.error.err, ENOENT);
  CHECK_EQ(std::string(ev.error.syscall), std::string("execve"));
  CHECK(!exists(scope.path + "/missing"));

  BrokerSpawn s = command({"/bin/true"}, "cwd-missing");
  s.cwd = "/nonexistent/proctree-cwd";
  CHECK_EQ(c.send_spawn(s, &id).err, 0);
  ev = next_event(c);
  CHECK_EQ(ev.kind, BrokerEvent::kSpawnFailed);
  CHECK_EQ(ev.error.err, ENOENT);
  CHECK_EQ(std::string(ev.error.syscall), std::string("chdir"));
  CHECK_EQ(ev.error.path, s.cwd);

  // Leaf names that would leave the scope, or take the broker's own leaf.
  for (const char* bad : {"../escape", "broker", "a/../../b"}) {
    CHECK_EQ(c.send_spawn(command({"/bin/true"}, bad), &id).err, 0);
    ev = next_event(c);
    CHECK_EQ(ev.kind, BrokerEvent::kSpawnFailed);
    CHECK_EQ(ev.error.err, EINVAL);
  }
  // A leaf that exists is not shared.
  CHECK_EQ(mkdir((scope.path + "/taken").c_str(), 0755), 0);
  CHECK_EQ(c.send_spawn(command({"/bin/true"}, "taken"), &id).err, 0);
  ev = next_event(c);
  CHECK_EQ(ev.kind, BrokerEvent::kSpawnFailed);
  CHECK_EQ(ev.error.err, EEXIST);
  CHECK_EQ(std::string(ev.error.syscall), std::string("mkdir"));
  rmdir((scope.path + "/taken").c_str());
  c.close();
  fixtures::wait_exit(c.process_pidfd());
}

TEST(a_broker_for_a_process_that_is_not_the_harness_refuses_to_start) {
  Scope scope;
  NEED_BROKER(scope);
  // A wrapper that swaps the harness's start time for a wrong one: the pid
  // is right, the process is not (as if the harness had died and its pid
  // had been reused before the broker looked).
  BrokerLaunch launch;
  launch.helper = helper();
  launch.wrapper = {"/bin/sh", "-c", "exec \"$1\" \"$2\" \"$3\" 1", "sh"};
  launch.cgroup_dir = scope.dir.dir_fd();
  BrokerClient c;
  CHECK_EQ(BrokerClient::start(launch, stack(), &c).err, 0);
  BrokerEvent ev;
  CHECK_EQ(c.wait_ready(5000, &ev).err, 0);
  CHECK_EQ(ev.kind, BrokerEvent::kClosed);
  CHECK_EQ(ev.error.err, ESRCH);
  CHECK_EQ(std::string(ev.error.syscall), std::string("pidfd_open"));
  proctree::ExitStatus st = fixtures::wait_exit(c.process_pidfd());
  CHECK_EQ(st.code, 1);
  // It touched nothing: no broker leaf.
  CHECK(!exists(scope.path + "/broker"));
}

TEST(a_wrapper_that_fails_reports_its_message) {
  Scope scope;
  NEED_BROKER(scope);
  BrokerLaunch launch;
  launch.helper = helper();
  launch.wrapper = {"/bin/sh", "-c", "echo 'Failed to connect to bus: No medium found' >&2; exit 1", "sh"};
  BrokerClient c;
  CHECK_EQ(BrokerClient::start(launch, stack(), &c).err, 0);
  BrokerEvent ev;
  CHECK_EQ(c.wait_ready(5000, &ev).err, 0);
  CHECK_EQ(ev.kind, BrokerEvent::kClosed);
  CHECK_EQ(ev.error.err, ECONNREFUSED);
  CHECK_EQ(ev.error.path, std::string("Failed to connect to bus: No medium found"));
  CHECK_EQ(fixtures::wait_exit(c.process_pidfd()).code, 1);
}

namespace {

struct DeathCase {
  std::string scope;
  bool no_cgroup_kill;
  std::string tok;
};

// The harness, in a forked copy of the test: starts a broker, two calls that
// escape their session (one in a nested leaf it made itself), tells the test
// where they are, and dies by SIGKILL.
int harness_that_dies(const DeathCase& dc, int report_fd) {
  BrokerLaunch launch;
  launch.helper = helper();
  CgroupDir scope;
  if (CgroupDir::create(dc.scope, true, &scope)) return 10;
  launch.cgroup_dir = scope.dir_fd();
  // The broker's pre-5.14 path (freeze + SIGKILL rounds), on any kernel.
  if (dc.no_cgroup_kill) {
    for (char** e = environ; *e; ++e) launch.envp.emplace_back(*e);
    launch.envp.push_back("PROCTREE_TEST_NO_CGROUP_KILL=1");
  }
  BrokerClient c;
  if (BrokerClient::start(launch, stack(), &c)) return 11;
  BrokerEvent ev;
  if (c.wait_ready(5000, &ev) || ev.kind != BrokerEvent::kReady) return 12;
  // The broker took the path asked for (kReady says whether it uses cgroup.kill).
  if (ev.cgroup_kill == dc.no_cgroup_kill) return 19;
  // The harness owns the scope: it makes a subtree, the broker a leaf in it.
  if (mkdir((dc.scope + "/sub").c_str(), 0755) != 0) return 13;
  std::string script = "(setsid sleep " + dc.tok + " &); nohup sleep " + dc.tok + " >/dev/null 2>&1 & exec sleep " + dc.tok;
  for (const char* leaf : {"one", "sub/two"}) {
    uint64_t id;
    if (c.send_spawn(command({"/bin/sh", "-c", script}, leaf), &id)) return 14;
    if (next_event(c).kind != BrokerEvent::kSpawned) return 15;
  }
  pid_t broker = ev.pid;
  if (write(report_fd, &broker, sizeof broker) != sizeof broker) return 16;
  // Wait until all six sleepers run, so the kill has something to do
  // (exit 20 + how many there were, if they do not).
  size_t seen = 0;
  for (int i = 0; i < 1000 && (seen = fixtures::live_with(dc.tok).size()) < 6; ++i) usleep(10 * 1000);
  if (seen < 6) return 20 + static_cast<int>(seen);
  raise(SIGKILL);
  return 18;
}

bool scope_empty(const void* arg) {
  const std::string& path = *static_cast<const std::string*>(arg);
  CgroupDir d;
  if (CgroupDir::create(path, true, &d)) return false;
  proctree::CgroupEvents ev;
  return !d.read_events(&ev) && !ev.populated;
}

void harness_death_case(bool no_cgroup_kill) {
  Scope scope;
  NEED_BROKER(scope);
  DeathCase dc{scope.path, no_cgroup_kill, token()};
  int report[2];
  CHECK_EQ(pipe2(report, O_CLOEXEC), 0);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    close(report[0]);
    _exit(harness_that_dies(dc, report[1]));
  }
  close(report[1]);
  pid_t broker = -1;
  ssize_t n = read(report[0], &broker, sizeof broker);
  close(report[0]);
  int status = 0;
  waitpid(child, &status, 0);
  // Died by SIGKILL; an exit code (1000 + code) says which step of harness_that_dies failed.
  CHECK_EQ(WIFSIGNALED(status) ? WTERMSIG(status) : 1000 + WEXITSTATUS(status), SIGKILL);
  CHECK_EQ(n, static_cast<ssize_t>(sizeof broker));
  // Every call, escapees included, and the broker itself: gone.
  CHECK(wait_until(scope_empty, &scope.path, 3000));
  CHECK(fixtures::live_with(dc.tok).empty());
  // The broker removed the leaves (its own is left for systemd, which
  // removes the whole scope once it is empty).
  CHECK(!exists(scope.path + "/one"));
  CHECK(!exists(scope.path + "/sub"));
  CHECK(exists(scope.path + "/broker"));
}

}  // namespace

TEST(harness_sigkilled_every_leaf_is_killed_by_cgroup_kill) { harness_death_case(false); }

TEST(harness_sigkilled_every_leaf_is_killed_by_freeze_and_sigkill_before_5_14) { harness_death_case(true); }

TEST(harness_closes_the_socket_leftovers_are_killed) {
  Scope scope;
  NEED_BROKER(scope);
  BrokerClient c;
  BrokerEvent ready;
  CHECK_EQ(start_broker(scope, &c, &ready).err, 0);
  std::string tok = token();
  uint64_t id;
  CHECK_EQ(c.send_spawn(command({"/bin/sh", "-c", "(setsid sleep " + tok + " &); exec sleep " + tok}), &id).err, 0);
  CHECK_EQ(next_event(c).kind, BrokerEvent::kSpawned);
  for (int i = 0; i < 500 && fixtures::live_with(tok).size() < 2; ++i) usleep(10 * 1000);
  CHECK_EQ(fixtures::live_with(tok).size(), size_t{2});
  c.close();
  proctree::ExitStatus st = fixtures::wait_exit(c.process_pidfd());
  CHECK(st.done);
  CHECK_EQ(st.code, 0);
  CHECK(fixtures::live_with(tok).empty());
  CHECK(scope_empty(&scope.path));
  CHECK(!exists(scope.path + "/call-1"));
}

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/proctree-unit-probe-XXXXXX";
    if (mkdtemp(tmpl)) path = tmpl;
  }
  ~TempDir() {
    if (path.empty()) return;
    unlink((path + "/systemd/private").c_str());
    unlink((path + "/bin/systemd-run").c_str());
    rmdir((path + "/systemd").c_str());
    rmdir((path + "/bin").c_str());
    rmdir(path.c_str());
  }
};

proctree::Fd listen_at(const std::string& path) {
  proctree::Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return proctree::Fd();
  if (listen(fd.get(), 4) != 0) return proctree::Fd();
  return fd;
}

}  // namespace

TEST(user_manager_probe_needs_systemd_run_a_runtime_dir_and_a_listener) {
  TempDir t;
  CHECK(!t.path.empty());
  CHECK_EQ(mkdir((t.path + "/bin").c_str(), 0755), 0);
  CHECK_EQ(mkdir((t.path + "/systemd").c_str(), 0700), 0);
  std::string path = "PATH=" + t.path + "/bin";

  // No systemd-run on PATH.
  proctree::UserManagerProbe p = proctree::probe_user_manager({path, "XDG_RUNTIME_DIR=" + t.path});
  CHECK(!p.ok);
  CHECK_EQ(p.err, ENOENT);
  CHECK(p.detail.find("systemd-run") != std::string::npos);

  // Found only, never run: any executable file will do.
  int fd = open((t.path + "/bin/systemd-run").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0755);
  CHECK(fd >= 0);
  close(fd);

  // A service or su: neither variable.
  p = proctree::probe_user_manager({path});
  CHECK(!p.ok);
  CHECK_EQ(p.err, ENOENT);
  CHECK_EQ(std::string(p.syscall), std::string("getenv"));
  CHECK_EQ(p.systemd_run, t.path + "/bin/systemd-run");

  // A runtime directory without a manager.
  p = proctree::probe_user_manager({path, "XDG_RUNTIME_DIR=" + t.path});
  CHECK(!p.ok);
  CHECK_EQ(p.err, ENOENT);
  CHECK_EQ(std::string(p.syscall), std::string("connect"));

  // A stale socket of a manager that is gone.
  {
    proctree::Fd gone = listen_at(t.path + "/systemd/private");
    CHECK(gone.valid());
  }
  p = proctree::probe_user_manager({path, "XDG_RUNTIME_DIR=" + t.path});
  CHECK(!p.ok);
  CHECK_EQ(p.err, ECONNREFUSED);
  unlink((t.path + "/systemd/private").c_str());

  // Someone of our uid listening: a manager answers.
  proctree::Fd live = listen_at(t.path + "/systemd/private");
  CHECK(live.valid());
  p = proctree::probe_user_manager({path, "XDG_RUNTIME_DIR=" + t.path});
  CHECK(p.ok);
  CHECK_EQ(p.socket, t.path + "/systemd/private");
  // The bus address alone is enough too.
  p = proctree::probe_user_manager({path, "DBUS_SESSION_BUS_ADDRESS=unix:path=" + t.path + "/systemd/private,guid=x"});
  CHECK(p.ok);
}

CHECK_MAIN()
