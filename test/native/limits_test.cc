// limits.cc on real cgroups: memory.max (+ memory.swap.max 0), pids.max and
// cpu.max written into a leaf, cleared back to "max", the counters that say
// a call hit them (a memory hog under 128 MiB is OOM-killed and oom_kill
// grows; a bounded fork loop under pids.max 64 is refused and pids.events max
// grows), and the reasons controller_report gives.
//
// The leaves are made in the cgroup PROCTREE_LIMITS_CGROUP names (one handed
// to the test, with memory, pids and cpu in its subtree_control: scripts/vm.sh
// --layout leaf gives /sys/fs/cgroup/harness, beside the test's own leaf),
// or else in the test's own cgroup when the kernel lets it have controllers
// there. Skipped, with controller_report's reason, on a host without them
// (a hybrid host's cgroup2 mount has none: they are bound to v1); the proof
// runs in a VM (test/limits-vm.test.ts).
#include "kernel/limits.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "check.h"
#include "fixtures.h"
#include "kernel/cgroup.h"

using proctree::CgroupDir;
using proctree::CgroupLocation;
using proctree::ControllerReport;
using proctree::LimitCounters;
using proctree::Limits;
using proctree::LimitVerdict;
using proctree::SysError;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Where the leaves go, or why there is nowhere.
struct Place {
  std::string mount;
  std::string parent;
  std::string why;
};

const Place& place() {
  static Place p = [] {
    Place out;
    CgroupLocation loc;
    if (SysError e = proctree::locate_cgroup2(&loc)) {
      out.why = std::string("no cgroup2: ") + e.syscall + " " + e.path;
      return out;
    }
    out.mount = loc.mount;
    const char* given = std::getenv("PROCTREE_LIMITS_CGROUP");
    out.parent = given && *given ? given : loc.own_path;
    ControllerReport report;
    if (SysError e = proctree::controller_report(out.mount, out.parent, proctree::kAllLimitControllers, &report)) {
      out.why = std::string("cannot read ") + e.path + ": errno " + std::to_string(e.err);
    } else if (report.missing) {
      out.why = "leaves made in " + out.parent + " get no " + report.reason;
    }
    return out;
  }();
  return p;
}

std::string make_leaf(CgroupDir* out, std::string* why) {
  static int counter = 0;
  const Place& p = place();
  if (!p.why.empty()) {
    *why = p.why;
    return {};
  }
  std::string path = p.parent + "/proctree-limits-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  if (SysError e = CgroupDir::create(path, false, out)) {
    *why = "cannot create " + path + ": errno " + std::to_string(e.err);
    return {};
  }
  return path;
}

// A child that waits for a byte on `go`, then runs fn and _exits with its
// value. It dies with the test (PR_SET_PDEATHSIG).
template <typename Fn>
pid_t start_child(int* go_write, Fn fn) {
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) return -1;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(100);
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(101);
    close(go[0]);
    _exit(fn());
  }
  close(go[0]);
  *go_write = go[1];
  return pid;
}

SysError move_into(const CgroupDir& leaf, pid_t pid) {
  return leaf.write_file("cgroup.procs", std::to_string(pid).c_str());
}

// Touches up to `limit` bytes, a MiB at a time (bounded: a memory cap that
// does not hold ends the loop and the child exits 0).
int hog(uint64_t limit) {
  for (uint64_t used = 0; used < limit; used += kMiB) {
    void* p = mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 2;
    std::memset(p, 0x5a, kMiB);
  }
  return 0;
}

// Forks up to `tries` children that wait until this one ends, and exits
// with how many forks succeeded (a bounded fork loop: the children end when
// the pipe they read closes, with this process).
int fork_until_refused(int tries) {
  int hold[2];
  if (pipe(hold) != 0) return 250;
  int made = 0;
  int refused = 0;
  for (int i = 0; i < tries; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      close(hold[1]);
      char c;
      while (read(hold[0], &c, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    if (pid < 0) {
      if (errno != EAGAIN) return 251;
      ++refused;
      continue;
    }
    ++made;
  }
  close(hold[1]);
  while (wait(nullptr) > 0) {
  }
  return refused > 0 ? made : 252;
}

}  // namespace

TEST(cpu_max_text_is_quota_and_period) {
  std::string s;
  CHECK(proctree::cpu_max_text(0.5, &s));
  CHECK_EQ(s, std::string("50000 100000"));
  CHECK(proctree::cpu_max_text(2, &s));
  CHECK_EQ(s, std::string("200000 100000"));
  CHECK(proctree::cpu_max_text(0.01, &s));
  CHECK_EQ(s, std::string("1000 100000"));
  // Under the kernel's 1 ms minimum, zero, negative, not a number.
  CHECK(!proctree::cpu_max_text(0.005, &s));
  CHECK(!proctree::cpu_max_text(0, &s));
  CHECK(!proctree::cpu_max_text(-1, &s));
  CHECK(!proctree::cpu_max_text(std::strtod("nan", nullptr), &s));
  Limits l;
  CHECK_EQ(l.controllers(), 0u);
  l.memory_bytes = 1;
  l.cpu = 0.5;
  CHECK_EQ(l.controllers(), static_cast<unsigned>(proctree::kLimitMemory | proctree::kLimitCpu));
}

TEST(report_names_the_fix_on_this_host) {
  // Wherever this runs: the report for the test's own cgroup is consistent
  // with its subtree_control, and every missing controller has a reason.
  CgroupLocation loc;
  if (proctree::locate_cgroup2(&loc)) SKIP("no cgroup2");
  ControllerReport r;
  CHECK(!proctree::controller_report(loc.mount, loc.own_path, proctree::kAllLimitControllers, &r));
  CHECK_EQ(r.missing, proctree::kAllLimitControllers & ~r.available);
  for (proctree::LimitController c : {proctree::kLimitMemory, proctree::kLimitPids, proctree::kLimitCpu}) {
    if (r.missing & c) CHECK(r.reason.find(proctree::limit_controller_name(c)) != std::string::npos);
  }
  CHECK_EQ(r.reason.empty(), r.missing == 0);
  std::printf("  own cgroup %s: available %u, %s\n", loc.own_path.c_str(), r.available,
              r.reason.empty() ? "nothing missing" : r.reason.c_str());
}

TEST(report_of_a_leaf_and_of_a_cgroup_with_processes) {
  CgroupDir leaf;
  std::string why;
  std::string path = make_leaf(&leaf, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&leaf);
  // The parent has them for its children; the new leaf has them in its
  // cgroup.controllers but enabled for none of its own children.
  ControllerReport r;
  CHECK(!proctree::controller_report(place().mount, place().parent, proctree::kAllLimitControllers, &r));
  CHECK_EQ(r.missing, 0u);
  CHECK_EQ(r.reason, std::string());
  CHECK(!proctree::controller_report(place().mount, path, proctree::kLimitMemory, &r));
  CHECK_EQ(r.missing, static_cast<unsigned>(proctree::kLimitMemory));
  CHECK_EQ(r.reason, "memory: enable in " + path + "/cgroup.subtree_control");
  // A cgroup below that leaf: not passed down, so the fix starts at the leaf.
  std::string below = path + "/below";
  CHECK(mkdir(below.c_str(), 0755) == 0);
  CHECK(!proctree::controller_report(place().mount, below, proctree::kLimitPids, &r));
  CHECK_EQ(r.reason, "pids: enable in " + path + "/cgroup.subtree_control and in each cgroup.subtree_control below it down to " +
                         below + "/cgroup.subtree_control");
  CHECK(rmdir(below.c_str()) == 0);
  // With a process in it, the report says the kernel will refuse memory
  // (a domain controller), and it does; pids and cpu (threaded
  // controllers) it allows.
  int go = -1;
  fixtures::Children kids;
  pid_t pid = kids.add(start_child(&go, [] { return 0; }));
  CHECK(pid > 0);
  CHECK(!move_into(leaf, pid));
  CHECK(!proctree::controller_report(place().mount, path, proctree::kLimitMemory, &r));
  CHECK(r.reason.find(path + " holds processes of its own") != std::string::npos);
  CHECK(!proctree::controller_report(place().mount, path, proctree::kLimitCpu | proctree::kLimitPids, &r));
  CHECK_EQ(r.reason.rfind("pids,cpu: enable in " + path + "/cgroup.subtree_control; " + path + " holds processes of its own", 0), 0u);
  // Nothing is ours to enable there: limits_reach says so.
  proctree::LimitsReach reach;
  CHECK(!proctree::limits_reach(place().mount, path, &reach));
  CHECK_EQ(reach.enableable, 0u);
  CHECK_EQ(reach.available, 0u);
  CHECK(reach.reason.find("move them into a leaf of their own first") != std::string::npos);
  SysError e = proctree::enable_controllers(leaf.dir_fd(), path, proctree::kLimitMemory);
  CHECK_EQ(e.err, EBUSY);
  CHECK_EQ(e.path, path + "/cgroup.subtree_control");
  CHECK(!proctree::enable_controllers(leaf.dir_fd(), path, proctree::kLimitCpu | proctree::kLimitPids));
  close(go);  // the child reads EOF and exits
  int status = 0;
  CHECK(kids.reap(pid, &status));
  // Empty again: now the kernel enables memory too.
  CHECK(!proctree::enable_controllers(leaf.dir_fd(), path, proctree::kLimitMemory));
  std::string enabled = slurp(path + "/cgroup.subtree_control");
  CHECK(enabled.find("memory") != std::string::npos);
  CHECK(enabled.find("cpu") != std::string::npos);
  CHECK(enabled.find("pids") != std::string::npos);
  CHECK(!proctree::controller_report(place().mount, path, proctree::kAllLimitControllers, &r));
  CHECK_EQ(r.missing, 0u);
  CHECK(!proctree::enable_controllers(leaf.dir_fd(), path, 0));
}

TEST(cpu_max_written_and_cleared) {
  CgroupDir leaf;
  std::string why;
  std::string path = make_leaf(&leaf, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&leaf);
  Limits l;
  l.cpu = 0.5;
  CHECK(!proctree::apply_limits(leaf.dir_fd(), path, l));
  CHECK_EQ(slurp(path + "/cpu.max"), std::string("50000 100000"));
  l.cpu = 2;
  CHECK(!proctree::apply_limits(leaf.dir_fd(), path, l));
  CHECK_EQ(slurp(path + "/cpu.max"), std::string("200000 100000"));
  // A value the kernel would refuse: EINVAL, and nothing written.
  l.cpu = 0.001;
  SysError e = proctree::apply_limits(leaf.dir_fd(), path, l);
  CHECK_EQ(e.err, EINVAL);
  CHECK_EQ(slurp(path + "/cpu.max"), std::string("200000 100000"));
  CHECK(!proctree::clear_limits(leaf.dir_fd(), path));
  CHECK_EQ(slurp(path + "/cpu.max"), std::string("max 100000"));
  CHECK_EQ(slurp(path + "/memory.max"), std::string("max"));
  CHECK_EQ(slurp(path + "/pids.max"), std::string("max"));
}

TEST(memory_hog_under_128_mib_is_oom_killed) {
  CgroupDir leaf;
  std::string why;
  std::string path = make_leaf(&leaf, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&leaf);
  Limits l;
  l.memory_bytes = 128 * kMiB;
  CHECK(!proctree::apply_limits(leaf.dir_fd(), path, l));
  CHECK_EQ(slurp(path + "/memory.max"), std::to_string(128 * kMiB));
  if (exists(path + "/memory.swap.max")) CHECK_EQ(slurp(path + "/memory.swap.max"), std::string("0"));
  LimitCounters before;
  CHECK(!proctree::read_limit_counters(leaf.dir_fd(), path, &before));
  CHECK(before.has_oom_kill);
  CHECK_EQ(before.oom_kill, 0u);

  // Up to 512 MiB: without the cap it would exit 0.
  int go = -1;
  fixtures::Children kids;
  pid_t pid = kids.add(start_child(&go, [] { return hog(512 * kMiB); }));
  CHECK(pid > 0);
  CHECK(!move_into(leaf, pid));
  CHECK(write(go, "g", 1) == 1);
  close(go);
  int status = 0;
  CHECK(kids.reap(pid, &status, 120000));
  CHECK(WIFSIGNALED(status));
  CHECK_EQ(WTERMSIG(status), SIGKILL);

  LimitCounters after;
  CHECK(!proctree::read_limit_counters(leaf.dir_fd(), path, &after));
  CHECK(after.oom_kill > before.oom_kill);
  LimitVerdict v = proctree::limit_verdict(before, after);
  CHECK(v.oom_killed);
  CHECK(!v.pids_limited);
  if (after.has_memory_peak) {
    // It reached the cap, and the cap held.
    CHECK(after.memory_peak > 100 * kMiB);
    CHECK(after.memory_peak <= 128 * kMiB);
  }
  std::printf("  oom_kill %llu -> %llu, memory.peak %s\n", static_cast<unsigned long long>(before.oom_kill),
              static_cast<unsigned long long>(after.oom_kill),
              after.has_memory_peak ? std::to_string(after.memory_peak).c_str() : "(none on this kernel)");

  // Cleared for the leaf's next call.
  CHECK(!proctree::clear_limits(leaf.dir_fd(), path));
  CHECK_EQ(slurp(path + "/memory.max"), std::string("max"));
  if (exists(path + "/memory.swap.max")) CHECK_EQ(slurp(path + "/memory.swap.max"), std::string("max"));
}

TEST(fork_loop_under_pids_max_64_is_refused) {
  CgroupDir leaf;
  std::string why;
  std::string path = make_leaf(&leaf, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&leaf);
  Limits l;
  l.pids = 64;
  CHECK(!proctree::apply_limits(leaf.dir_fd(), path, l));
  CHECK_EQ(slurp(path + "/pids.max"), std::string("64"));
  LimitCounters before;
  CHECK(!proctree::read_limit_counters(leaf.dir_fd(), path, &before));
  CHECK(before.has_pids_max);
  CHECK_EQ(before.pids_max, 0u);

  // 200 tries, at most 63 of them can succeed (the looping child is the 64th).
  int go = -1;
  fixtures::Children kids;
  pid_t pid = kids.add(start_child(&go, [] { return fork_until_refused(200); }));
  CHECK(pid > 0);
  CHECK(!move_into(leaf, pid));
  CHECK(write(go, "g", 1) == 1);
  close(go);
  int status = 0;
  CHECK(kids.reap(pid, &status, 120000));
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 63);

  LimitCounters after;
  CHECK(!proctree::read_limit_counters(leaf.dir_fd(), path, &after));
  CHECK(after.pids_max > before.pids_max);
  LimitVerdict v = proctree::limit_verdict(before, after);
  CHECK(v.pids_limited);
  CHECK(!v.oom_killed);
  if (after.has_pids_peak) CHECK_EQ(after.pids_peak, 64u);
  std::printf("  pids.events max %llu -> %llu, pids.peak %s\n", static_cast<unsigned long long>(before.pids_max),
              static_cast<unsigned long long>(after.pids_max),
              after.has_pids_peak ? std::to_string(after.pids_peak).c_str() : "(none on this kernel)");

  CHECK(!proctree::clear_limits(leaf.dir_fd(), path));
  CHECK_EQ(slurp(path + "/pids.max"), std::string("max"));
}

TEST(limit_without_its_controller_is_enoent_naming_the_file) {
  CgroupDir leaf;
  std::string why;
  std::string path = make_leaf(&leaf, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&leaf);
  // Below the leaf nothing is enabled: the files are not there.
  CgroupDir inner;
  std::string inner_path = path + "/inner";
  CHECK(!CgroupDir::create(inner_path, false, &inner));
  CHECK(!exists(inner_path + "/memory.max"));
  Limits l;
  l.memory_bytes = 64 * kMiB;
  SysError e = proctree::apply_limits(inner.dir_fd(), inner_path, l);
  CHECK_EQ(e.err, ENOENT);
  CHECK_EQ(e.path, inner_path + "/memory.max");
  l = Limits{};
  l.pids = 10;
  e = proctree::apply_limits(inner.dir_fd(), inner_path, l);
  CHECK_EQ(e.path, inner_path + "/pids.max");
  // Nothing to clear there, and no error for it; counters all absent.
  CHECK(!proctree::clear_limits(inner.dir_fd(), inner_path));
  LimitCounters c;
  CHECK(!proctree::read_limit_counters(inner.dir_fd(), inner_path, &c));
  CHECK(!c.has_oom_kill);
  CHECK(!c.has_pids_max);
  CHECK(!c.has_memory_peak);
  CHECK(!c.has_pids_peak);
  CHECK(!inner.remove());
}

TEST(subtrees_go_beside_a_harness_that_sits_in_a_leaf) {
  // This process's cgroup: where the subtrees go, and what they can have.
  CgroupLocation loc;
  if (proctree::locate_cgroup2(&loc)) SKIP("no cgroup2");
  const std::string parent = proctree::subtree_parent(loc);
  proctree::LimitsReach reach;
  CHECK(!proctree::limits_reach(loc.mount, parent, &reach));
  CHECK_EQ(reach.available & reach.enableable, reach.enableable);
  for (proctree::LimitController c : {proctree::kLimitMemory, proctree::kLimitPids, proctree::kLimitCpu}) {
    // Each controller is either reachable or named, with its fix.
    CHECK((reach.available & c) != 0 || reach.reason.find(proctree::limit_controller_name(c)) != std::string::npos);
  }
  std::printf("  own %s: subtrees in %s, available %u, %s\n", loc.own_path.c_str(), parent.c_str(), reach.available,
              reach.reason.empty() ? "nothing missing" : reach.reason.c_str());
  const char* given = std::getenv("PROCTREE_LIMITS_CGROUP");
  if (given && *given && loc.own_path.rfind(std::string(given) + "/", 0) == 0) {
    // scripts/vm.sh --layout leaf: this process in harness/main, memory
    // enabled in harness: the subtrees go in harness, with everything.
    CHECK_EQ(parent, std::string(given));
    CHECK_EQ(reach.available, static_cast<unsigned>(proctree::kAllLimitControllers));
    CHECK_EQ(reach.reason, std::string());
  } else if (loc.own_path == loc.mount) {
    // The root cgroup: exempt from the rule, never left.
    CHECK_EQ(parent, loc.own_path);
  }
  // A leaf that is a systemd unit, or the hierarchy's root as the parent:
  // never beside them.
  CgroupLocation unit = loc;
  unit.own_path = loc.mount + "/app.slice/term.scope";
  CHECK_EQ(proctree::subtree_parent(unit), unit.own_path);
  // A harness run as a tool call of another harness: inside that call.
  CgroupLocation nested = loc;
  nested.own_path = loc.mount + "/harness/proctree-1-0123456789ab-agent/c5";
  CHECK_EQ(proctree::subtree_parent(nested), nested.own_path);
  CgroupLocation top = loc;
  top.own_path = loc.mount + "/harness";
  CHECK_EQ(proctree::subtree_parent(top), top.own_path);
}

CHECK_MAIN()
