// What spawn_process (a vfork on a thread that may block) guarantees the
// harness, on the real kernel. Whatever may kill or wedge a process runs in
// a forked, sacrificial copy of the test, never in the test runner itself.
//   * OOM: a child held before its exec in a memory-limited cgroup is not
//     the OOM killer's victim (in_vfork): a child sharing our memory without
//     the vfork would be, scored by the harness's RSS, and the harness would
//     die with it.
//   * A spawning thread cannot exit while its child still runs on it.
//   * The clone() fallback into a frozen cgroup blocks its thread only:
//     another thread reads the pid and pidfd, and kills the child.
//   * A spawn with uid/gid leaves the harness dumpable.
//   * An inherited environment is copied when the spawn starts.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "fixtures.h"
#include "kernel/cgroup.h"
#include "kernel/pidfd.h"
#include "kernel/pty.h"
#include "kernel/spawn.h"
#include "kernel/stdio_fds.h"

using proctree::ChildStack;
using proctree::EarlyIds;
using proctree::SpawnRequest;
using proctree::SpawnResult;
using proctree::SysError;

namespace {

SpawnRequest request(std::vector<std::string> argv) {
  SpawnRequest req;
  req.candidates = {argv[0]};
  req.argv = std::move(argv);
  req.envp = {"PATH=/usr/bin:/bin"};
  return req;
}

uint64_t now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

// Polls fn() every 5 ms until it is true or timeout_ms have passed.
template <typename Fn>
bool wait_for(Fn fn, int timeout_ms = 10000) {
  const uint64_t end = now_ms() + static_cast<uint64_t>(timeout_ms);
  for (;;) {
    if (fn()) return true;
    if (now_ms() >= end) return false;
    usleep(5 * 1000);
  }
}

// The system call thread `tid` of this process is blocked in, from
// /proc/self/task/<tid>/syscall ("<nr> <args>..."), or -1 when it runs.
long blocked_in(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
  std::string first;
  if (!(f >> first) || first == "running") return -1;
  return strtol(first.c_str(), nullptr, 10);
}

bool is_clone_call(long nr) { return nr == 435 /* clone3 */ || nr == __NR_clone; }

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool write_text(const std::string& path, const std::string& text) {
  proctree::Fd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return false;
  return write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

// Touches n bytes of fresh anonymous memory (so they count in the RSS).
void* touch(size_t n) {
  void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  for (size_t i = 0; i < n; i += 4096) static_cast<volatile char*>(m)[i] = 1;
  return m;
}

// A cgroup v1 memory cgroup of the test's own, below the memory cgroup this
// process is in (found from /proc/self/mountinfo and /proc/self/cgroup),
// removed with its members (ours) when it leaves the scope.
class V1Memcg {
 public:
  V1Memcg() = default;
  V1Memcg(const V1Memcg&) = delete;
  V1Memcg& operator=(const V1Memcg&) = delete;
  ~V1Memcg() { destroy(); }

  bool create(std::string* why) {
    std::string mount, root;
    std::ifstream mi("/proc/self/mountinfo");
    for (std::string line; std::getline(mi, line);) {
      // id parent maj:min root mountpoint opts [optional...] - fstype source superopts
      size_t dash = line.find(" - ");
      if (dash == std::string::npos) continue;
      std::istringstream tail(line.substr(dash + 3));
      std::string fstype, source, super;
      tail >> fstype >> source >> super;
      if (fstype != "cgroup") continue;
      bool memory = false;
      std::istringstream opts(super);
      for (std::string o; std::getline(opts, o, ',');) memory = memory || o == "memory";
      if (!memory) continue;
      std::istringstream head(line.substr(0, dash));
      std::string id, parent, dev;
      head >> id >> parent >> dev >> root >> mount;
      break;
    }
    if (mount.empty()) {
      *why = "no cgroup v1 memory hierarchy mounted";
      return false;
    }
    std::string own;
    std::ifstream cg("/proc/self/cgroup");
    for (std::string line; std::getline(cg, line);) {
      size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      std::istringstream ctrls(line.substr(a + 1, b - a - 1));
      for (std::string c; std::getline(ctrls, c, ',');) {
        if (c == "memory") own = line.substr(b + 1);
      }
    }
    if (own.empty()) {
      *why = "this process has no v1 memory cgroup";
      return false;
    }
    if (root != "/" && own.compare(0, root.size(), root) == 0) own = own.substr(root.size());
    if (own == "/") own.clear();
    static int counter = 0;
    path_ = mount + own + "/proctree-safety-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
    if (mkdir(path_.c_str(), 0755) != 0) {
      *why = "cannot create " + path_ + ": " + strerror(errno);
      path_.clear();
      return false;
    }
    return true;
  }

  const std::string& path() const { return path_; }
  bool set(const char* file, const std::string& value) const { return write_text(path_ + "/" + file, value); }
  bool add(pid_t pid) const { return set("cgroup.procs", std::to_string(pid)); }
  // "oom_kill N" of memory.oom_control: how many the OOM killer killed here.
  long oom_kills() const {
    std::istringstream in(read_text(path_ + "/memory.oom_control"));
    std::string key;
    long value;
    while (in >> key >> value) {
      if (key == "oom_kill") return value;
    }
    return -1;
  }
  std::vector<pid_t> members() const {
    std::vector<pid_t> out;
    std::istringstream in(read_text(path_ + "/cgroup.procs"));
    for (pid_t p; in >> p;) out.push_back(p);
    return out;
  }

  void destroy() {
    if (path_.empty()) return;
    // Only our own processes are ever in it (the filler, the spawned child).
    for (int i = 0; i < 500; ++i) {
      std::vector<pid_t> m = members();
      if (m.empty() && rmdir(path_.c_str()) == 0) break;
      for (pid_t p : m) kill(p, SIGKILL);
      usleep(10 * 1000);
    }
    path_.clear();
  }

 private:
  std::string path_;
};

// A v2 cgroup of the test's own, frozen when asked, destroyed (thawed and
// emptied) when it leaves the scope.
struct Leaf {
  proctree::CgroupDir dir;
  std::string path;
  ~Leaf() {
    if (dir.valid()) {
      dir.write_file("cgroup.freeze", "0");
      fixtures::destroy_test_cgroup(&dir);
    }
  }
  bool create(std::string* why) {
    path = fixtures::make_test_cgroup(&dir, why);
    if (path.empty()) return false;
    if (!dir.has_file("cgroup.freeze")) {
      *why = "no cgroup.freeze (Linux < 5.2)";
      return false;
    }
    return true;
  }
  bool freeze(bool on) const { return dir.write_file("cgroup.freeze", on ? "1" : "0").err == 0; }
};

// Primes the process's spawn state: its first spawn shows whether CLONE_VM
// is real (later spawns read no report pipe).
bool prime() {
  static ChildStack s;
  SpawnResult r;
  if (proctree::spawn_process(request({"/bin/true"}), s, &r)) return false;
  fixtures::wait_exit(r.pidfd.get());
  return true;
}

// A spawn on a thread of its own (standing in for a spawner thread), with
// what it returns and its thread id.
struct SpawnerThread {
  SpawnRequest req;
  ChildStack stack;
  EarlyIds ids;
  SpawnResult result;
  SysError error;
  std::atomic<pid_t> tid{0};
  std::atomic<bool> done{false};
  std::thread thread;

  // A scenario that gives up early leaves its thread (blocked on a held
  // child) to the process's exit.
  ~SpawnerThread() {
    if (thread.joinable()) thread.detach();
  }

  void start(bool with_early_ids = true) {
    thread = std::thread([this, with_early_ids] {
      tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
      error = proctree::spawn_process(req, stack, &result, with_early_ids ? &ids : nullptr);
      done.store(true);
    });
  }
};

// ---------------------------------------------------------------- OOM

constexpr size_t kMiB = 1024 * 1024;

// The sacrificial harness: 150 MiB touched, a child held before its exec
// (born frozen) moved into the limited memory cgroup, the filler told to
// overflow it, and after the OOM kill, a thaw and the child's exec. Exits 0
// when all went as it should; the OOM killer's SIGKILL otherwise.
int oom_harness(const Leaf& leaf, const V1Memcg& memcg, int go_fd) {
  if (!prime()) return 2;
  if (!touch(150 * kMiB)) return 3;
  SpawnRequest req = request({"/bin/sh", "-c", "exit 7"});
  req.cgroup_dir = leaf.dir.dir_fd();
  SpawnerThread spawner;
  pid_t pid = 0;
  int pidfd = -1;
  spawner.req = req;
  spawner.start();
  if (!wait_for([&] { return proctree::read_early_ids(spawner.ids, &pid, &pidfd) && pidfd >= 0; })) return 4;
  if (!memcg.add(pid)) return 7;
  if (write(go_fd, "g", 1) != 1) return 8;
  // The filler overflows the limit: the OOM killer picks a victim among the
  // cgroup's tasks (the filler, the held child).
  if (!wait_for([&] { return memcg.oom_kills() >= 1; }, 30000)) return 9;
  if (!leaf.freeze(false)) return 10;
  if (!wait_for([&] { return spawner.done.load(); })) return 11;
  spawner.thread.join();
  if (spawner.error) return 12;
  proctree::ExitStatus st = fixtures::wait_exit(pidfd);
  if (!st.done || st.code != 7) {
    std::printf("     the child: code %d signal %d\n", st.code, st.signal);
    return 13;
  }
  return 0;
}

// The OOM scenario; the harness's exit status (as fixtures::exit_code: 100
// + signal when killed), or -1 with *why (skip).
int oom_scenario(std::string* why) {
  if (geteuid() != 0) {
    *why = "needs root (a v1 memory cgroup of its own)";
    return -1;
  }
  if (!proctree::clone3_available()) {
    *why = "no clone3 (CLONE_INTO_CGROUP) here";
    return -1;
  }
  V1Memcg memcg;
  if (!memcg.create(why)) return -1;
  Leaf leaf;
  if (!leaf.create(why)) return -1;
  if (!memcg.set("memory.limit_in_bytes", std::to_string(64 * kMiB)) || !leaf.freeze(true)) {
    *why = "cannot set the limit or freeze";
    return -1;
  }
  int ready[2], go[2];
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) return 90;
  fixtures::Children children;
  // The filler: nearly fills the cgroup, then on "go" asks for more.
  pid_t filler = fork();
  if (filler == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!memcg.add(getpid())) _exit(2);
    if (!touch(40 * kMiB)) _exit(3);
    if (write(ready[1], "r", 1) != 1) _exit(4);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(5);
    touch(64 * kMiB);  // past the limit: someone here is killed
    for (;;) pause();
  }
  children.add(filler);
  char c;
  if (read(ready[0], &c, 1) != 1) return 91;
  int rc = fixtures::run_forked([&] { return oom_harness(leaf, memcg, go[1]); });
  close(ready[0]);
  close(ready[1]);
  close(go[0]);
  close(go[1]);
  std::printf("     harness %s (%d), OOM kills in the cgroup: %ld\n", rc == 0 ? "survived" : "failed", rc,
              memcg.oom_kills());
  children.stop_all();
  return rc;
}

TEST(oom_in_the_childs_memory_cgroup_spares_the_harness) {
  std::string why;
  int rc = oom_scenario(&why);
  if (rc < 0) SKIP(why);
  CHECK_EQ(rc, 0);
}

// -------------------------------------------------- a thread that spawns

// A thread (on a stack we unmap once it has ended, as a worker's may be)
// spawns into a frozen cgroup and ends. With spawn_process it cannot end
// before its child's exec: it is seen blocked in the clone while the child
// is held, and the child execs fine once thawed. Returns 0 when so; 20 or
// 21 when the thread ended before its child's exec.
int thread_scenario() {
  if (!prime()) return 2;
  std::string why;
  Leaf leaf;
  if (!leaf.create(&why) || !leaf.freeze(true)) {
    std::printf("     skipped: %s\n", why.c_str());
    return 0;
  }
  SpawnRequest req = request({"/bin/sh", "-c", "exit 5"});
  req.cgroup_dir = leaf.dir.dir_fd();
  // The thread's stack, its TLS at the top: ours, to unmap after it ends.
  const size_t size = 1024 * 1024;
  void* stack = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED) return 3;
  struct Shared {
    SpawnRequest* req;
    ChildStack child_stack;
    EarlyIds ids;
    SpawnResult result;
    SysError error;
    std::atomic<pid_t> tid{0};
  } sh;
  sh.req = &req;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, stack, size);
  pthread_t th;
  auto body = [](void* p) -> void* {
    Shared* s = static_cast<Shared*>(p);
    s->tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
    s->error = proctree::spawn_process(*s->req, s->child_stack, &s->result, &s->ids);
    return nullptr;
  };
  if (pthread_create(&th, &attr, body, &sh) != 0) return 4;
  pid_t pid = 0;
  int pidfd = -1;
  if (!wait_for([&] { return proctree::read_early_ids(sh.ids, &pid, &pidfd) && pidfd >= 0; })) return 5;
  // Held before its exec: has the thread ended, or is it in the clone?
  pid_t tid = sh.tid.load();
  bool ended_first = false, in_clone = false;
  wait_for([&] {
    if (pthread_tryjoin_np(th, nullptr) == 0) return ended_first = true;
    return in_clone = is_clone_call(blocked_in(tid));
  });
  if (ended_first) {
    // Its stack and TLS go now, while its child has not exec'd.
    munmap(stack, size);
    stack = nullptr;
  }
  if (!leaf.freeze(false)) return 6;
  if (!ended_first) {
    pthread_join(th, nullptr);
    munmap(stack, size);
    stack = nullptr;
  }
  proctree::ExitStatus st = fixtures::wait_exit(pidfd);
  std::printf("     the thread %s before the exec; the child: code %d signal %d\n",
              ended_first ? "ENDED" : (in_clone ? "waited in the clone" : "was not seen"), st.code, st.signal);
  // The thread ended first (it must not): its child still exec'd (20), or
  // died on the thread's unmapped stack or TLS (21).
  if (ended_first) return st.signal != 0 ? 21 : 20;
  if (!in_clone) return 7;
  if (sh.error) return 8;
  if (!st.done || st.code != 5) return 9;
  return 0;
}

TEST(a_spawning_thread_waits_for_its_childs_exec) {
  CHECK_EQ(fixtures::run_forked([] { return thread_scenario(); }), 0);
}

// ------------------------------------- the clone() fallback, frozen cgroup

// clone3 refused (seccomp, as Docker's default profile): the child joins
// the frozen cgroup itself and is held there, its spawning thread blocked
// in the vfork. Another thread reads the pid and pidfd within a bound and
// kills the child by its pidfd; the spawn then returns. with_early_ids
// false (the spawn as it was): nothing is published, and only a thaw (the
// cleanup) ends it; returns 30 then.
int fallback_frozen_scenario(bool with_early_ids) {
  std::string why;
  Leaf leaf;
  if (!leaf.create(&why) || !leaf.freeze(true)) {
    std::printf("     skipped: %s\n", why.c_str());
    return 0;
  }
  if (!fixtures::install_emulator_like_filter(false)) return 2;
  SpawnerThread spawner;
  spawner.req = request({"/bin/sh", "-c", "exit 6"});
  spawner.req.cgroup_dir = leaf.dir.dir_fd();
  spawner.start(with_early_ids);
  pid_t pid = 0;
  int pidfd = -1;
  // Published within milliseconds when it is at all.
  bool published = wait_for([&] { return proctree::read_early_ids(spawner.ids, &pid, &pidfd) && pidfd >= 0; },
                            with_early_ids ? 10000 : 3000);
  if (!published) {
    bool blocked = wait_for([&] { return is_clone_call(blocked_in(spawner.tid.load())); });
    std::printf("     nothing published; the spawning thread %s\n",
                blocked ? "is blocked in clone()" : "is not blocked");
    leaf.freeze(false);
    spawner.thread.join();
    if (!spawner.error) fixtures::wait_exit(spawner.result.pidfd.get());
    return blocked ? 30 : 3;
  }
  // Held in the frozen cgroup, its spawning thread still in clone().
  std::vector<pid_t> members;
  bool member = wait_for([&] {
    members.clear();
    leaf.dir.read_procs(&members);
    return members.size() == 1 && members[0] == pid;
  });
  bool blocked = wait_for([&] { return is_clone_call(blocked_in(spawner.tid.load())); });
  bool not_done = !spawner.done.load();
  int sig = proctree::pidfd_signal(pidfd, SIGKILL);
  bool returned = wait_for([&] { return spawner.done.load(); });
  if (returned) spawner.thread.join();
  std::printf("     pid %d pidfd %d: member %d, thread blocked %d, kill %d, spawn returned %d\n", pid, pidfd,
              member, blocked, sig, returned);
  if (!member) return 4;
  if (!blocked || !not_done) return 5;
  if (sig != 0) return 6;
  if (!returned) {
    leaf.freeze(false);
    spawner.thread.join();
    return 7;
  }
  if (spawner.error) return 8;
  if (spawner.result.method != proctree::CloneMethod::kClone) return 9;
  if (spawner.result.pid != pid || spawner.result.pidfd.get() != pidfd) return 10;
  proctree::ExitStatus st = fixtures::wait_exit(pidfd);
  if (st.signal != SIGKILL) return 11;
  return 0;
}

TEST(clone_fallback_into_a_frozen_cgroup_blocks_only_its_thread) {
  CHECK_EQ(fixtures::run_forked([] { return fallback_frozen_scenario(true); }), 0);
}

// The check can fail: without EarlyIds (the spawn as it was), the blocked
// spawn tells no other thread whom to kill.
TEST(clone_fallback_into_a_frozen_cgroup_publishes_nothing_without_early_ids) {
  CHECK_EQ(fixtures::run_forked([] { return fallback_frozen_scenario(false); }), 30);
}

// ------------------------------------------------------------- dumpable

// 0 when the harness is still dumpable after a spawn with uid/gid 65534
// (and the spawn's report of a failed step still arrives); 40 when it is
// not (a child that shared our memory when it setuid).
int dumpable_scenario() {
  if (prctl(PR_SET_DUMPABLE, 1) != 0 || prctl(PR_GET_DUMPABLE) != 1) return 2;
  if (!prime()) return 3;
  SpawnRequest req = request({"/bin/sh", "-c", "test \"$(id -u):$(id -g)\" = 65534:65534"});
  req.set_uid = req.set_gid = true;
  req.uid = 65534;
  req.gid = 65534;
  SpawnResult r;
  static ChildStack s;
  if (SysError e = proctree::spawn_process(req, s, &r)) {
    std::printf("     spawn: %s %s\n", e.syscall, strerror(e.err));
    return 4;
  }
  proctree::ExitStatus st = fixtures::wait_exit(r.pidfd.get());
  int dumpable = prctl(PR_GET_DUMPABLE);
  std::printf("     %s: PR_GET_DUMPABLE after a uid/gid spawn: %d; the child: code %d\n",
              proctree::clone_method_name(r.method), dumpable, st.code);
  if (!st.done || st.code != 0) return 5;
  if (dumpable != 1) return 40;
  // A failed step, reported through the shared page (the child's memory is
  // a copy of ours).
  SpawnRequest missing = req;
  missing.candidates = {"/nonexistent/proctree-safety"};
  SysError e = proctree::spawn_process(missing, s, &r);
  if (e.err != ENOENT || std::string(e.syscall) != "execve") return 6;
  SpawnRequest bad_cwd = req;
  bad_cwd.cwd = "/nonexistent/proctree-safety-cwd";
  e = proctree::spawn_process(bad_cwd, s, &r);
  if (e.err != ENOENT || std::string(e.syscall) != "chdir") return 7;
  if (prctl(PR_GET_DUMPABLE) != 1) return 41;
  return 0;
}

TEST(uid_gid_spawn_leaves_the_harness_dumpable) {
  if (geteuid() != 0) SKIP("needs root (setuid to 65534)");
  CHECK_EQ(fixtures::run_forked([] { return dumpable_scenario(); }), 0);
}

// The same through both clone() fallbacks (no clone3; no CLONE_PIDFD).
TEST(uid_gid_spawn_through_the_clone_fallbacks_leaves_the_harness_dumpable) {
  if (geteuid() != 0) SKIP("needs root (setuid to 65534)");
  for (bool refuse_clone_pidfd : {false, true}) {
    CHECK_EQ(fixtures::run_forked([refuse_clone_pidfd] {
               if (!fixtures::install_emulator_like_filter(refuse_clone_pidfd)) return 50;
               return dumpable_scenario();
             }),
             0);
  }
}

// ---------------------------------------------------- inherited environment

// The child reads the environment as it was when the spawn started: held
// in a frozen cgroup, it does not see a setenv() done meanwhile (which
// replaces environ's entry; musl frees the replaced string).
TEST(inherited_environment_is_copied_when_the_spawn_starts) {
  Leaf leaf;
  std::string why;
  if (!leaf.create(&why) || !leaf.freeze(true)) SKIP(why);
  if (!proctree::clone3_available()) SKIP("no clone3 (CLONE_INTO_CGROUP) here");
  CHECK_EQ(setenv("PROCTREE_SAFETY_ENV", "at-spawn", 1), 0);
  std::vector<proctree::StdioSpec> spec = {{proctree::StdioSpec::kIgnore, -1},
                                           {proctree::StdioSpec::kPipe, -1},
                                           {proctree::StdioSpec::kInherit, -1}};
  proctree::PreparedStdio io;
  CHECK_EQ(proctree::prepare_stdio(spec, proctree::PtySize{}, &io).err, 0);
  SpawnerThread spawner;
  spawner.req = request({"/bin/sh", "-c", "printf %s \"$PROCTREE_SAFETY_ENV\""});
  spawner.req.inherit_env = true;
  spawner.req.fds = io.fds;
  spawner.req.cgroup_dir = leaf.dir.dir_fd();
  spawner.start();
  pid_t pid = 0;
  int pidfd = -1;
  bool published = wait_for([&] { return proctree::read_early_ids(spawner.ids, &pid, &pidfd); });
  setenv("PROCTREE_SAFETY_ENV", "changed-after", 1);
  leaf.freeze(false);
  spawner.thread.join();
  unsetenv("PROCTREE_SAFETY_ENV");
  io.child.clear();
  CHECK(published);
  CHECK_EQ(spawner.error.err, 0);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(io.parent[1].get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  fixtures::wait_exit(spawner.result.pidfd.get());
  CHECK_EQ(out, std::string("at-spawn"));
}

// snapshot_environ, on the thread that may setenv, turns inherit_env into
// a copy in envp: what the child gets is the environment at that moment.
TEST(snapshot_environ_copies_the_environment_into_the_request) {
  CHECK_EQ(setenv("PROCTREE_SAFETY_SNAPSHOT", "snap", 1), 0);
  SpawnRequest req = request({"/bin/true"});
  req.envp = {"PROCTREE_SAFETY_OWN=1"};
  req.inherit_env = true;
  proctree::snapshot_environ(&req);
  unsetenv("PROCTREE_SAFETY_SNAPSHOT");
  CHECK(!req.inherit_env);
  bool found = false, own = false;
  for (const std::string& kv : req.envp) {
    found = found || kv == "PROCTREE_SAFETY_SNAPSHOT=snap";
    own = own || kv == "PROCTREE_SAFETY_OWN=1";
  }
  CHECK(found);
  CHECK(!own);  // the request's own envp was replaced, not appended to
}

// EarlyIds on the usual path: published while the child is held, the same
// pid and pidfd the spawn returns; and a failed step leaves the pidfd open
// in the result (the number a reader saw is not reused under it).
TEST(early_ids_are_published_before_the_exec_and_kept_on_failure) {
  if (!proctree::clone3_available()) SKIP("no clone3 (CLONE_INTO_CGROUP) here");
  Leaf leaf;
  std::string why;
  if (!leaf.create(&why) || !leaf.freeze(true)) SKIP(why);
  SpawnerThread spawner;
  spawner.req = request({"/nonexistent/proctree-safety-early"});
  spawner.req.cgroup_dir = leaf.dir.dir_fd();
  spawner.start();
  pid_t pid = 0;
  int pidfd = -1;
  bool published = wait_for([&] { return proctree::read_early_ids(spawner.ids, &pid, &pidfd) && pidfd >= 0; });
  bool blocked = published && wait_for([&] { return is_clone_call(blocked_in(spawner.tid.load())); });
  std::vector<pid_t> members;
  leaf.dir.read_procs(&members);
  leaf.freeze(false);
  spawner.thread.join();
  CHECK(published);
  CHECK(blocked);
  CHECK_EQ(members.size(), size_t{1});
  CHECK_EQ(members[0], pid);
  CHECK_EQ(spawner.error.err, ENOENT);
  CHECK_EQ(std::string(spawner.error.syscall), "execve");
  CHECK_EQ(spawner.result.pid, pid);
  CHECK_EQ(spawner.result.pidfd.get(), pidfd);
  // Reaped already: the pidfd is open, its process gone.
  CHECK_EQ(fcntl(pidfd, F_GETFD) >= 0, true);
  CHECK_EQ(proctree::pidfd_signal(pidfd, 0), ESRCH);
}

// A child killed by its pidfd while held before its first step (born into
// a frozen cgroup): the spawn returns it (no step failed), and its exit
// status says SIGKILL. In a fresh process too, whose first spawn still
// reads a report pipe (a real vfork not yet seen).
int killed_before_it_ran() {
  if (!proctree::clone3_available()) return 0;
  std::string why;
  Leaf leaf;
  if (!leaf.create(&why) || !leaf.freeze(true)) {
    std::printf("     skipped: %s\n", why.c_str());
    return 0;
  }
  SpawnerThread spawner;
  spawner.req = request({"/bin/true"});
  spawner.req.cgroup_dir = leaf.dir.dir_fd();
  spawner.start();
  pid_t pid = 0;
  int pidfd = -1;
  if (!wait_for([&] { return proctree::read_early_ids(spawner.ids, &pid, &pidfd) && pidfd >= 0; })) return 2;
  if (proctree::pidfd_signal(pidfd, SIGKILL) != 0) return 3;
  if (!wait_for([&] { return spawner.done.load(); })) return 4;
  spawner.thread.join();
  if (spawner.error) {
    std::printf("     spawn: %s %s\n", spawner.error.syscall, strerror(spawner.error.err));
    return 5;
  }
  if (spawner.result.pid != pid) return 6;
  if (fixtures::wait_exit(spawner.result.pidfd.get()).signal != SIGKILL) return 7;
  // And the next spawn is an ordinary one.
  static ChildStack s;
  SpawnResult r;
  if (proctree::spawn_process(request({"/bin/sh", "-c", "exit 4"}), s, &r)) return 8;
  if (fixtures::wait_exit(r.pidfd.get()).code != 4) return 9;
  return 0;
}

SCENARIO(killed_before_it_ran_first_spawn) { return killed_before_it_ran(); }

TEST(a_child_killed_before_it_ran_is_returned_killed) {
  CHECK(prime());
  CHECK_EQ(fixtures::run_forked([] { return killed_before_it_ran(); }), 0);
  CHECK_EQ(fixtures::run_scenario("killed_before_it_ran_first_spawn"), 0);
}

}  // namespace

CHECK_MAIN()
