// cgroup.cc: finding cgroup2 from /proc/self/mountinfo and /proc/self/cgroup
// (never assuming /sys/fs/cgroup: hybrid hosts mount it at .../unified), and
// the directory type a call lives in: events, members (nested ones too), and
// removal of what the command created inside it.
#include "kernel/cgroup.h"

#include <fcntl.h>
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

// A child that waits in pause() until killed.
pid_t start_sleeper() {
  pid_t pid = fork();
  if (pid == 0) {
    for (;;) pause();
  }
  return pid;
}

void stop(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
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

TEST(read_pid_cgroup_matches_location) {
  CgroupLocation loc;
  if (proctree::locate_cgroup2(&loc)) SKIP("this host has no cgroup2 mount");
  std::string rel;
  CHECK(proctree::read_pid_cgroup(getpid(), &rel));
  CHECK(!rel.empty() && rel[0] == '/');
  // loc.own is rel with the mount's root taken off.
  if (loc.own != "/") {
    CHECK(rel.size() >= loc.own.size());
    CHECK_EQ(rel.substr(rel.size() - loc.own.size()), loc.own);
  }
}

TEST(read_pid_cgroup_of_gone_process_is_false) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  CHECK(pid > 0);
  waitpid(pid, nullptr, 0);
  std::string rel;
  CHECK(!proctree::read_pid_cgroup(pid, &rel));
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
  CgroupEvents ev;
  CHECK(!dir.read_events(&ev));
  CHECK(!ev.populated);
  CHECK(!ev.frozen);
  std::vector<pid_t> members;
  CHECK(!dir.read_procs(&members));
  CHECK(members.empty());
  CHECK(dir.has_file("cgroup.kill"));
  CHECK(!dir.has_file("no-such-file"));

  pid_t a = start_sleeper();
  pid_t b = start_sleeper();
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
  waitpid(a, &sa, 0);
  waitpid(b, &sb, 0);
  bool emptied = wait_populated(dir, false);
  nested.close();
  SysError rm = dir.remove();  // EBUSY at first: inner must go before it
  bool gone = !exists(path);
  if (!gone) fixtures::destroy_test_cgroup(&dir);

  CHECK_EQ(ne.err, 0);
  CHECK_EQ(wa.err, 0);
  CHECK_EQ(wb.err, 0);
  CHECK(populated);
  std::vector<pid_t> want{std::min(a, b), std::max(a, b)};
  CHECK(members == want);
  CHECK_EQ(k.err, 0);
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
  pid_t a = start_sleeper();
  dir.write_file("cgroup.procs", std::to_string(a).c_str());
  SysError f = dir.write_file("cgroup.freeze", "1");
  bool frozen = false;
  for (int i = 0; i < 300 && !frozen; ++i) {
    CgroupEvents ev;
    frozen = !dir.read_events(&ev) && ev.frozen;
    if (!frozen) usleep(10 * 1000);
  }
  dir.write_file("cgroup.freeze", "0");
  stop(a);
  fixtures::destroy_test_cgroup(&dir);
  CHECK_EQ(f.err, 0);
  CHECK(frozen);
  CHECK(!exists(path));
}

TEST(remove_of_gone_directory_is_not_an_error) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  CHECK_EQ(rmdir(path.c_str()), 0);
  CHECK_EQ(dir.remove().err, 0);
}

CHECK_MAIN()
