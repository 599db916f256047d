// cgroup.cc: finding cgroup2 from /proc/self/mountinfo and /proc/self/cgroup
// (never assuming /sys/fs/cgroup: hybrid hosts mount it at .../unified), and
// the directory type a call lives in: events, members (nested ones too), and
// removal of what the command created inside it.
#include "kernel/cgroup.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "check.h"
#include "fixtures.h"

using proctree::CgroupDir;
using proctree::CgroupEvents;
using proctree::CgroupLocation;
using proctree::SysError;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Moves pid into the cgroup at path.
SysError place(const std::string& path, pid_t pid) {
  CgroupDir d;
  if (SysError e = CgroupDir::open_existing(path, &d)) return e;
  return d.write_file("cgroup.procs", std::to_string(pid).c_str());
}

// Makes base/<name>/<name>/... depth levels deep; returns the deepest path,
// or an empty string when a mkdir failed.
std::string make_chain(const std::string& base, const std::string& name, int depth) {
  std::string path = base;
  for (int i = 0; i < depth; ++i) {
    path += "/" + name;
    if (mkdir(path.c_str(), 0755) != 0) return {};
  }
  return path;
}

int open_fd_count() {
  int n = 0;
  for (int fd = 0; fd < 1024; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) ++n;
  }
  return n;
}

bool wait_populated(const CgroupDir& dir, bool want) {
  for (int i = 0; i < 300; ++i) {
    CgroupEvents ev;
    if (dir.read_events(&ev)) return false;
    if (ev.populated == want) return true;
    usleep(10 * 1000);
  }
  return false;
}

// A child with a second thread (both waiting in pause() until killed; it
// dies with this process): its pid, and the second thread's id in *tid.
int pause_forever(void*) {
  for (;;) pause();
  return 0;
}

pid_t start_two_threads(pid_t* tid) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    static char stack[64 * 1024] __attribute__((aligned(16)));
    pid_t t = clone(pause_forever, stack + sizeof stack,
                    CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM, nullptr);
    if (write(p[1], &t, sizeof t) != sizeof t) _exit(1);
    for (;;) pause();
  }
  close(p[1]);
  *tid = -1;
  if (pid > 0 && read(p[0], tid, sizeof *tid) != sizeof *tid) *tid = -1;
  close(p[0]);
  return pid;
}

}  // namespace

TEST(locate_agrees_with_mountinfo) {
  CgroupLocation loc;
  SysError e = proctree::locate_cgroup2(&loc);
  if (e.err == ENOENT) SKIP("this host has no cgroup2 mount");
  CHECK_EQ(e.err, 0);
  std::printf("     cgroup2 at %s, own %s\n", loc.mount.c_str(), loc.own.c_str());
  CHECK(!loc.mount.empty() && loc.mount[0] == '/');
  CHECK(!loc.own.empty() && loc.own[0] == '/');
  CHECK_EQ(loc.own_path, loc.own == "/" ? loc.mount : loc.mount + loc.own);
  // A cgroup2 directory has cgroup.controllers, which no v1 hierarchy has.
  CHECK(exists(loc.mount + "/cgroup.controllers"));
  CHECK(exists(loc.own_path + "/cgroup.procs"));
  // The mountinfo line names the same mount point with fstype cgroup2.
  std::string mountinfo = slurp("/proc/self/mountinfo");
  CHECK(mountinfo.find(" " + loc.mount + " ") != std::string::npos);
}

TEST(own_cgroup_lists_this_process) {
  CgroupLocation loc;
  if (proctree::locate_cgroup2(&loc)) SKIP("this host has no cgroup2 mount");
  std::string procs = slurp(loc.own_path + "/cgroup.procs");
  CHECK(("\n" + procs).find("\n" + std::to_string(getpid()) + "\n") != std::string::npos);
}

TEST(proc_pid_cgroup_matches_location) {
  CgroupLocation loc;
  if (proctree::locate_cgroup2(&loc)) SKIP("this host has no cgroup2 mount");
  std::string rel;
  CHECK(fixtures::pid_cgroup(getpid(), &rel));
  CHECK(!rel.empty() && rel[0] == '/');
  // loc.own is rel with the mount's root taken off.
  if (loc.own != "/") {
    CHECK(rel.size() >= loc.own.size());
    CHECK_EQ(rel.substr(rel.size() - loc.own.size()), loc.own);
  }
}

TEST(proc_pid_cgroup_of_gone_process_is_false) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  CHECK(pid > 0);
  waitpid(pid, nullptr, 0);
  std::string rel;
  CHECK(!fixtures::pid_cgroup(pid, &rel));
}

TEST(create_refuses_existing_unless_allowed) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  CgroupDir again;
  SysError e = CgroupDir::create(path, false, &again);
  CgroupDir shared;
  SysError e2 = CgroupDir::create(path, true, &shared);
  shared.close();
  fixtures::destroy_test_cgroup(&dir);
  CHECK_EQ(e.err, EEXIST);
  CHECK_EQ(std::string(e.syscall), std::string("mkdir"));
  CHECK_EQ(e.path, path);
  CHECK_EQ(e2.err, 0);
  CHECK(!exists(path));
}

TEST(events_and_members_follow_the_processes_in_it) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children children;
  CgroupEvents ev;
  CHECK(!dir.read_events(&ev));
  CHECK(!ev.populated);
  CHECK(!ev.frozen);
  std::vector<pid_t> members;
  CHECK(!dir.read_procs(&members));
  CHECK(members.empty());
  CHECK(dir.has_file("cgroup.kill"));
  CHECK(!dir.has_file("no-such-file"));

  pid_t a = children.add(fixtures::start_sleeper());
  pid_t b = children.add(fixtures::start_sleeper());
  CHECK(a > 0 && b > 0);
  // A command may nest cgroups of its own: their members are the call's too.
  CgroupDir nested;
  SysError ne = CgroupDir::create(path + "/inner", false, &nested);
  SysError wa = dir.write_file("cgroup.procs", std::to_string(a).c_str());
  SysError wb = nested.write_file("cgroup.procs", std::to_string(b).c_str());
  bool populated = wait_populated(dir, true);
  dir.read_procs(&members);
  std::sort(members.begin(), members.end());

  // cgroup.kill reaches the nested member too.
  SysError k = dir.write_file("cgroup.kill", "1");
  int sa = 0, sb = 0;
  bool reaped = children.reap(a, &sa) && children.reap(b, &sb);
  bool emptied = wait_populated(dir, false);
  nested.close();
  SysError rm = dir.remove();  // EBUSY at first: inner must go before it
  bool gone = !exists(path);

  CHECK_EQ(ne.err, 0);
  CHECK_EQ(wa.err, 0);
  CHECK_EQ(wb.err, 0);
  CHECK(populated);
  std::vector<pid_t> want{std::min(a, b), std::max(a, b)};
  CHECK(members == want);
  CHECK_EQ(k.err, 0);
  CHECK(reaped);
  CHECK(WIFSIGNALED(sa) && WTERMSIG(sa) == SIGKILL);
  CHECK(WIFSIGNALED(sb) && WTERMSIG(sb) == SIGKILL);
  CHECK(emptied);
  CHECK_EQ(rm.err, 0);
  CHECK(gone);
}

TEST(freeze_shows_in_events) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children children;
  pid_t a = children.add(fixtures::start_sleeper());
  CHECK(a > 0);
  SysError p = dir.write_file("cgroup.procs", std::to_string(a).c_str());
  SysError f = dir.write_file("cgroup.freeze", "1");
  bool frozen = false;
  for (int i = 0; i < 300 && !frozen; ++i) {
    CgroupEvents ev;
    frozen = !dir.read_events(&ev) && ev.frozen;
    if (!frozen) usleep(10 * 1000);
  }
  dir.write_file("cgroup.freeze", "0");
  children.stop({a});
  fixtures::destroy_test_cgroup(&dir);
  CHECK_EQ(p.err, 0);
  CHECK_EQ(f.err, 0);
  CHECK(frozen);
  CHECK(!exists(path));
}

TEST(remove_of_gone_directory_is_not_an_error) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  CHECK_EQ(rmdir(path.c_str()), 0);
  CHECK_EQ(dir.remove().err, 0);
}

// A command may make cgroups of its own, of any name (".x" is hidden from a
// glob) and any depth: its members are the call's, and its directories must
// go when the call's does, deepest first.
TEST(members_deep_below_and_in_hidden_cgroups_are_found_and_removed) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children children;
  std::string deepest = make_chain(path, "n", 60);
  std::string hidden = path + "/.x";
  bool made_hidden = mkdir(hidden.c_str(), 0755) == 0;
  std::string hidden_deep = made_hidden ? make_chain(hidden, ".y", 3) : std::string();
  pid_t a = children.add(fixtures::start_sleeper());
  pid_t b = children.add(fixtures::start_sleeper());
  pid_t c = children.add(fixtures::start_sleeper());
  pid_t d = children.add(fixtures::start_sleeper());
  CHECK(a > 0 && b > 0 && c > 0 && d > 0);
  SysError pa = deepest.empty() ? SysError::of(ENOENT, "mkdir") : place(deepest, a);
  SysError pb = made_hidden ? place(hidden, b) : SysError::of(ENOENT, "mkdir");
  SysError pc = place(path, c);
  SysError pd = hidden_deep.empty() ? SysError::of(ENOENT, "mkdir") : place(hidden_deep, d);
  std::vector<pid_t> members;
  SysError rp = dir.read_procs(&members);
  std::sort(members.begin(), members.end());

  // Populated: remove() must refuse, and leave the members where they are.
  SysError busy = dir.remove();
  bool still_there = exists(deepest);
  std::string where;
  bool read_where = fixtures::pid_cgroup(a, &where);

  SysError k = dir.write_file("cgroup.kill", "1");
  bool reaped = true;
  for (pid_t p : {a, b, c, d}) reaped = children.reap(p) && reaped;
  bool emptied = wait_populated(dir, false);
  SysError rm = dir.remove();
  bool gone = !exists(path);

  CHECK(!deepest.empty());
  CHECK(made_hidden);
  CHECK_EQ(pa.err, 0);
  CHECK_EQ(pb.err, 0);
  CHECK_EQ(pc.err, 0);
  CHECK_EQ(pd.err, 0);
  CHECK_EQ(rp.err, 0);
  std::vector<pid_t> want{a, b, c, d};
  std::sort(want.begin(), want.end());
  CHECK(members == want);
  CHECK_EQ(busy.err, EBUSY);
  CHECK(still_there);
  CHECK(read_where);
  CHECK(where.size() > 60 * 2 && where.compare(where.size() - 4, 4, "/n/n") == 0);
  CHECK_EQ(k.err, 0);
  CHECK(reaped);
  CHECK(emptied);
  CHECK_EQ(rm.err, 0);
  CHECK(gone);
}

// A tool call may make a threaded cgroup below its leaf (cgroup.type
// "threaded") and move a thread there: reading that cgroup's cgroup.procs
// fails with EOPNOTSUPP. Its processes are still members: a walk from the
// leaf lists each once (from the threaded domain, or from cgroup.threads
// through /proc/<tid>/status), and a walk from the threaded cgroup itself
// finds the process of the thread it holds.
TEST(threaded_subtree_members_are_listed) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children children;
  std::string domain = path + "/d";
  std::string threaded = domain + "/t";
  bool made = mkdir(domain.c_str(), 0755) == 0 && mkdir(threaded.c_str(), 0755) == 0;
  CgroupDir t;
  bool typed = made && !CgroupDir::open_existing(threaded, &t) && !t.write_file("cgroup.type", "threaded");
  if (made && !typed) SKIP("cannot make a threaded cgroup here");
  pid_t tid = -1;
  pid_t a = children.add(start_two_threads(&tid));
  pid_t b = children.add(fixtures::start_sleeper());
  // a's main thread stays in the domain, its second thread moves to t; b
  // (one thread) moves whole into t.
  SysError pa = place(domain, a);
  SysError pb = place(domain, b);
  SysError ta = t.write_file("cgroup.threads", std::to_string(tid).c_str());
  SysError tb = t.write_file("cgroup.threads", std::to_string(b).c_str());
  std::string procs_of_t;
  bool procs_refused = t.read_file("cgroup.procs", &procs_of_t).err == EOPNOTSUPP;

  std::vector<pid_t> from_leaf;
  SysError rl = dir.read_procs(&from_leaf);
  std::vector<pid_t> from_t;
  SysError rt = t.read_procs(&from_t);
  std::sort(from_leaf.begin(), from_leaf.end());
  std::sort(from_t.begin(), from_t.end());

  CHECK(made);
  CHECK(a > 0 && b > 0 && tid > 0 && tid != a);
  CHECK_EQ(pa.err, 0);
  CHECK_EQ(pb.err, 0);
  CHECK_EQ(ta.err, 0);
  CHECK_EQ(tb.err, 0);
  CHECK(procs_refused);
  CHECK_EQ(rl.err, 0);
  CHECK_EQ(rt.err, 0);
  std::vector<pid_t> want{std::min(a, b), std::max(a, b)};
  CHECK(from_leaf == want);
  CHECK(from_t == want);
}

// The walk holds two descriptors at a time: neither a deep chain nor a low
// RLIMIT_NOFILE stops it (read_procs and remove in a child limited to 20).
TEST(tree_walk_works_under_a_low_descriptor_limit) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children children;
  std::string deepest = make_chain(path, "n", 60);
  std::string side = make_chain(path, ".x", 30);
  pid_t a = children.add(fixtures::start_sleeper());
  pid_t b = children.add(fixtures::start_sleeper());
  bool placed = !deepest.empty() && !side.empty() && !place(deepest, a) && !place(side, b);
  int rc = fixtures::run_forked([&]() -> int {
    if (open_fd_count() > 14) return 2;  // the limit below must leave room
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 20;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return 3;
    std::vector<pid_t> members;
    if (dir.read_procs(&members)) return 4;
    std::sort(members.begin(), members.end());
    std::vector<pid_t> want{std::min(a, b), std::max(a, b)};
    if (members != want) return 5;
    if (dir.write_file("cgroup.kill", "1")) return 6;
    if (!wait_populated(dir, false)) return 7;
    if (SysError e = dir.remove()) return 8;
    return 0;
  });
  bool reaped = children.reap(a) && children.reap(b);
  bool gone = !exists(path);
  CHECK(placed);
  CHECK(reaped);
  CHECK_EQ(rc, 0);
  CHECK(gone);
}

// Before Linux 5.14 (no cgroup.kill), a round is freeze, SIGKILL each member
// by pidfd, thaw: a tree that keeps forking is emptied by repeated rounds.
// PROCTREE_TEST_NO_CGROUP_KILL=1 is read once per process: a fresh one.
SCENARIO(kill_rounds_without_cgroup_kill) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) {
    std::printf("     skip: %s\n", why.c_str());
    return 77;
  }
  fixtures::CgroupGuard guard(&dir);
  if (dir.has_kill()) return 2;
  CgroupDir inner;
  if (CgroupDir::create(path + "/inner", false, &inner)) return 3;
  int go[2];
  if (pipe(go) != 0) return 4;
  // A forker in the cgroup: a child every millisecond (at most 400), half of
  // them moving into a nested cgroup, each forking one grandchild. It starts
  // once it is in the cgroup (a child forked before would stay outside).
  pid_t forker = fork();
  if (forker == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(1);
    close(go[0]);
    for (int i = 0; i < 400; ++i) {
      pid_t c = fork();
      if (c == 0) {
        if (i % 2 == 1) inner.write_file("cgroup.procs", "0");
        if (fork() < 0) _exit(1);
        for (;;) pause();
      }
      usleep(1000);
    }
    for (;;) pause();
  }
  close(go[0]);
  int rc = 0;
  if (dir.write_file("cgroup.procs", std::to_string(forker).c_str())) rc = 5;
  // Not in the cgroup: it gets EOF and exits without forking.
  if (!rc && write(go[1], "x", 1) != 1) rc = 6;
  close(go[1]);
  // Let it grow a tree first.
  std::vector<pid_t> members;
  for (int i = 0; !rc && i < 500; ++i) {
    dir.read_procs(&members);
    if (members.size() >= 40) break;
    usleep(2000);
  }
  if (!rc && members.size() < 40) rc = 7;
  int rounds = 0;
  bool emptied = false;
  for (; !rc && rounds < 200 && !emptied; ++rounds) {
    if (SysError e = dir.kill_round()) {
      std::printf("     kill_round: %s errno %d\n", e.syscall, e.err);
      rc = 8;
      break;
    }
    CgroupEvents ev;
    for (int i = 0; i < 10 && !emptied; ++i) {
      emptied = !dir.read_events(&ev) && !ev.populated;
      if (!emptied) usleep(1000);
    }
  }
  int status = 0;
  // Whatever went wrong, the forker is ours to stop (its tree is in the
  // cgroup, which the guard kills, unless rc is 5): a bounded wait, then
  // SIGKILL, so rounds that failed to kill it cannot hang the test.
  if (rc) kill(forker, SIGKILL);
  if (!fixtures::reap_within(forker, &status, rc ? 10000 : 2000)) {
    kill(forker, SIGKILL);
    waitpid(forker, nullptr, 0);
    if (!rc) rc = 12;
  }
  std::printf("     %zu members when the rounds began, empty after %d round(s)\n", members.size(), rounds);
  if (!rc && !emptied) rc = 9;
  if (!rc && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) rc = 10;
  inner.close();
  fixtures::destroy_test_cgroup(&dir);
  if (!rc && exists(path)) rc = 11;
  return rc;
}

TEST(kill_rounds_empty_a_forking_tree_without_cgroup_kill) {
  int rc = fixtures::run_scenario("kill_rounds_without_cgroup_kill", {{"PROCTREE_TEST_NO_CGROUP_KILL", "1"}});
  if (rc == 77) SKIP("no writable cgroup2");
  CHECK_EQ(rc, 0);
}

// The same rounds in a harness with few descriptors to spare (RLIMIT_NOFILE
// 20) and a tree of 100: the members are held by pidfds in batches, and
// each batch's confirmation re-reads cgroup.procs, which needs descriptors
// of its own. Every round must still kill, and the rounds empty the tree.
SCENARIO(kill_rounds_under_a_low_descriptor_limit) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) {
    std::printf("     skip: %s\n", why.c_str());
    return 77;
  }
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children children;
  if (dir.has_kill()) return 2;
  std::vector<pid_t> pids;
  for (int i = 0; i < 100; ++i) {
    pid_t p = children.add(fixtures::start_sleeper());
    if (p < 0) break;
    pids.push_back(p);
    dir.write_file("cgroup.procs", std::to_string(p).c_str());
  }
  int rc = pids.size() == 100 ? 0 : 3;
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  rlimit low = lim;
  low.rlim_cur = 20;
  if (!rc && open_fd_count() > 12) rc = 4;
  if (!rc && setrlimit(RLIMIT_NOFILE, &low) != 0) rc = 5;
  int rounds = 0;
  bool emptied = false;
  SysError first;
  for (; !rc && rounds < 50 && !emptied; ++rounds) {
    SysError e = dir.kill_round();
    if (e && !first) first = e;
    for (int i = 0; i < 20 && !emptied; ++i) {
      CgroupEvents ev;
      emptied = !dir.read_events(&ev) && !ev.populated;
      if (!emptied) usleep(1000);
    }
  }
  setrlimit(RLIMIT_NOFILE, &lim);
  std::vector<pid_t> left;
  dir.read_procs(&left);
  std::printf("     %zu of 100 left after %d round(s); first error: %s errno %d\n", left.size(), rounds,
              first.syscall, first.err);
  fixtures::destroy_test_cgroup(&dir);
  for (pid_t p : pids) {
    if (!children.reap(p) && !rc) rc = 8;
  }
  if (!rc && !emptied) rc = 6;
  if (!rc && first) rc = 7;
  return rc;
}

TEST(kill_rounds_work_under_a_low_descriptor_limit) {
  int rc = fixtures::run_scenario("kill_rounds_under_a_low_descriptor_limit", {{"PROCTREE_TEST_NO_CGROUP_KILL", "1"}});
  if (rc == 77) SKIP("no writable cgroup2");
  CHECK_EQ(rc, 0);
}

TEST(has_kill_follows_the_kernel_unless_disabled_for_test) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  bool has = dir.has_kill();
  bool file = dir.has_file("cgroup.kill");
  fixtures::destroy_test_cgroup(&dir);
  CHECK(!proctree::cgroup_kill_disabled_for_test());
  CHECK_EQ(has, file);
}

TEST(mounts_and_hierarchies_from_mountinfo_text) {
  // A hybrid host: v1 controllers, v2 at .../unified, plus a bind mount of a
  // part of v2 elsewhere and a mount point with a space (escaped \040).
  const std::string mountinfo =
      "25 1 0:23 / /sys rw - sysfs sysfs rw\n"
      "30 25 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n"
      "31 30 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
      "32 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
      "90 1 0:27 /user.slice /srv/my\\040cg rw - cgroup2 cgroup2 rw\n";
  std::vector<proctree::Cgroup2Mount> mounts = proctree::cgroup2_mounts(mountinfo);
  CHECK_EQ(mounts.size(), size_t{2});
  CHECK_EQ(mounts[0].mount, std::string("/sys/fs/cgroup/unified"));
  CHECK_EQ(mounts[0].root, std::string("/"));
  CHECK_EQ(mounts[0].device, std::string("0:27"));
  CHECK_EQ(mounts[1].mount, std::string("/srv/my cg"));
  CHECK_EQ(mounts[1].root, std::string("/user.slice"));
  std::vector<proctree::Cgroup2Mount> h = proctree::cgroup2_hierarchies(mountinfo);
  CHECK_EQ(h.size(), size_t{1});
  CHECK_EQ(h[0].mount, std::string("/sys/fs/cgroup/unified"));

  CgroupLocation loc;
  CHECK_EQ(proctree::locate_cgroup2_in(mountinfo, "1:memory:/x\n0::/user.slice/session-1.scope\n", &loc).err, 0);
  CHECK_EQ(loc.mount, std::string("/sys/fs/cgroup/unified"));
  CHECK_EQ(loc.own, std::string("/user.slice/session-1.scope"));
  CHECK_EQ(loc.own_path, std::string("/sys/fs/cgroup/unified/user.slice/session-1.scope"));
  // Only the bind mount shows a cgroup below it: that one is taken, and the
  // path is relative to what it shows.
  const std::string bind_only = "90 1 0:27 /user.slice /srv/cg rw - cgroup2 cgroup2 rw\n";
  CHECK_EQ(proctree::locate_cgroup2_in(bind_only, "0::/user.slice/a\n", &loc).err, 0);
  CHECK_EQ(loc.own_path, std::string("/srv/cg/a"));
  // "/user.slicex" is not below "/user.slice".
  proctree::SysError e = proctree::locate_cgroup2_in(bind_only, "0::/user.slicex\n", &loc);
  CHECK_EQ(e.err, ENOENT);
  // No v2 line in /proc/self/cgroup (a pure v1 host).
  CHECK_EQ(proctree::locate_cgroup2_in(mountinfo, "1:memory:/x\n", &loc).err, ENOENT);
}

CHECK_MAIN()
