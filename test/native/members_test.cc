// members.cc: signalling a tree's members by pidfd, each confirmed a member
// while its pidfd is held. What is dropped by the confirmation is not
// handled; a process that is gone is skipped without an error; a tree larger
// than the descriptors we may open is handled in batches; and when not even
// one pidfd can be opened, the error says so (EMFILE) instead of a silent
// empty pass.
#include "kernel/members.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <vector>

#include "check.h"
#include "fixtures.h"
#include "kernel/pidfd.h"
#include "ladder/cgroup_confinement.h"

using proctree::Held;
using proctree::SysError;

namespace {

// How many of pids exited by SIGKILL, reaping each that ends within the
// (bounded) wait; one that was not killed stays for the guard to stop.
int reap_killed(fixtures::Children* children, const std::vector<pid_t>& pids) {
  int n = 0;
  for (pid_t p : pids) {
    int status = 0;
    if (children->reap(p, &status, 5000) && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ++n;
  }
  return n;
}

bool still_running(pid_t pid) {
  siginfo_t si{};
  return waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

int lowest_free_fd() {
  int fd = 0;
  while (fcntl(fd, F_GETFD) != -1) ++fd;
  return fd;
}

}  // namespace

TEST(confirm_decides_who_is_handled) {
  fixtures::Children children;
  std::vector<pid_t> pids = children.start_sleepers(10);
  CHECK_EQ(pids.size(), size_t{10});
  std::set<pid_t> dropped(pids.begin(), pids.begin() + 4);
  std::vector<pid_t> handled;
  int confirms = 0;
  SysError e = proctree::for_each_confirmed(
      pids,
      [&](std::vector<Held>* held) {
        ++confirms;
        held->erase(std::remove_if(held->begin(), held->end(), [&](const Held& h) { return dropped.count(h.pid); }),
                    held->end());
        return SysError::none();
      },
      [&](Held& h) {
        handled.push_back(h.pid);
        proctree::pidfd_signal(h.pidfd.get(), SIGKILL);
      });
  // Those dropped were not touched; the others were killed through the
  // pidfd (each exits by SIGKILL, which takes a moment to land).
  std::vector<bool> running;
  for (pid_t p : pids) running.push_back(still_running(p));
  std::vector<pid_t> handled_pids(pids.begin() + 4, pids.end());
  int killed = reap_killed(&children, handled_pids);
  children.stop(std::vector<pid_t>(pids.begin(), pids.begin() + 4));
  CHECK_EQ(e.err, 0);
  CHECK_EQ(confirms, 1);
  std::sort(handled.begin(), handled.end());
  std::vector<pid_t> want(pids.begin() + 4, pids.end());
  std::sort(want.begin(), want.end());
  CHECK(handled == want);
  for (size_t i = 0; i < 4; ++i) CHECK(running[i]);
  CHECK_EQ(killed, 6);
}

TEST(gone_processes_are_skipped_without_error) {
  fixtures::Children children;
  std::vector<pid_t> pids = children.start_sleepers(3);
  CHECK_EQ(pids.size(), size_t{3});
  // The middle one exits and is reaped: its number names no process now.
  children.stop({pids[1]});
  std::vector<pid_t> handled;
  SysError e = proctree::for_each_confirmed(
      pids, [](std::vector<Held>*) { return SysError::none(); }, [&](Held& h) { handled.push_back(h.pid); });
  children.stop({pids[0], pids[2]});
  CHECK_EQ(e.err, 0);
  CHECK_EQ(handled.size(), size_t{2});
  CHECK_EQ(handled[0], pids[0]);
  CHECK_EQ(handled[1], pids[2]);
}

TEST(confirm_error_is_returned) {
  fixtures::Children children;
  std::vector<pid_t> pids = children.start_sleepers(2);
  int handled = 0;
  SysError e = proctree::for_each_confirmed(
      pids, [](std::vector<Held>*) { return SysError::of(EIO, "read", "cgroup.procs"); },
      [&](Held&) { ++handled; });
  children.stop(pids);
  CHECK_EQ(e.err, EIO);
  CHECK_EQ(std::string(e.syscall), std::string("read"));
  CHECK_EQ(handled, 0);
}

TEST(keep_listed_keeps_only_listed) {
  fixtures::Children children;
  std::vector<pid_t> pids = children.start_sleepers(3);
  CHECK_EQ(pids.size(), size_t{3});
  std::vector<Held> held;
  for (pid_t p : pids) held.push_back(Held{p, proctree::pidfd_open(p)});
  std::vector<pid_t> listed = {pids[2], 1, pids[0]};
  proctree::keep_listed(&held, &listed);
  children.stop(pids);
  CHECK_EQ(held.size(), size_t{2});
  CHECK_EQ(held[0].pid, pids[0]);
  CHECK_EQ(held[1].pid, pids[2]);
  CHECK(std::is_sorted(listed.begin(), listed.end()));
}

// 200 members, at most 16 descriptors: handled in batches, every member
// once (each dies of the SIGKILL sent through its pidfd).
TEST(many_members_under_a_low_descriptor_limit) {
  int rc = fixtures::run_forked([]() -> int {
    fixtures::Children children;
    std::vector<pid_t> pids = children.start_sleepers(200);
    if (pids.size() != 200) {
      children.stop(pids);
      return 2;
    }
    if (lowest_free_fd() > 8) {
      children.stop(pids);
      return 3;
    }
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 16;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return 4;
    std::set<pid_t> seen;
    int calls = 0, confirms = 0;
    size_t max_batch = 0;
    SysError e = proctree::for_each_confirmed(
        pids,
        [&](std::vector<Held>* held) {
          ++confirms;
          max_batch = std::max(max_batch, held->size());
          return SysError::none();
        },
        [&](Held& h) {
          ++calls;
          seen.insert(h.pid);
          proctree::pidfd_signal(h.pidfd.get(), SIGKILL);
        });
    int killed = reap_killed(&children, pids);
    std::printf("     %d members handled in %d batches of at most %zu\n", calls, confirms, max_batch);
    if (e) return 5;
    if (calls != 200 || seen.size() != 200) return 6;
    if (killed != 200) return 7;
    if (confirms < 200 / 16) return 8;
    return 0;
  });
  CHECK_EQ(rc, 0);
}

// The same, with a confirmation that itself needs descriptors (as the cgroup
// tier's does: it re-reads cgroup.procs, opening the directories it walks).
// A batch that took every free descriptor leaves it none.
TEST(many_members_under_a_low_descriptor_limit_when_confirm_opens_files) {
  int rc = fixtures::run_forked([]() -> int {
    fixtures::Children children;
    std::vector<pid_t> pids = children.start_sleepers(200);
    if (pids.size() != 200) {
      children.stop(pids);
      return 2;
    }
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 16;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return 4;
    int calls = 0;
    SysError e = proctree::for_each_confirmed(
        pids,
        [&](std::vector<Held>*) {
          // Two descriptors at once, like a directory and its cgroup.procs.
          proctree::Fd a(open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
          if (!a) return SysError::from_errno("open", "/proc/self/stat");
          proctree::Fd b(open("/proc/self/status", O_RDONLY | O_CLOEXEC));
          if (!b) return SysError::from_errno("open", "/proc/self/status");
          return SysError::none();
        },
        [&](Held& h) {
          ++calls;
          proctree::pidfd_signal(h.pidfd.get(), SIGKILL);
        });
    // What was not killed is killed here, so the reap cannot block.
    for (pid_t p : pids) kill(p, SIGKILL);
    int killed_before = calls;
    reap_killed(&children, pids);
    std::printf("     %d of 200 members handled (error: %s errno %d)\n", killed_before, e.syscall, e.err);
    if (calls != 200) return 6;
    if (e) return 5;
    return 0;
  });
  CHECK_EQ(rc, 0);
}

// Not one descriptor free: nothing can be held, and the caller must hear of
// it (EMFILE from pidfd_open), not get an empty pass that looks like "no
// members".
TEST(no_free_descriptor_is_emfile) {
  int rc = fixtures::run_forked([]() -> int {
    fixtures::Children children;
    std::vector<pid_t> pids = children.start_sleepers(5);
    if (pids.size() != 5) {
      children.stop(pids);
      return 2;
    }
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = static_cast<rlim_t>(lowest_free_fd());
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return 4;
    int calls = 0, confirms = 0;
    SysError e = proctree::for_each_confirmed(
        pids,
        [&](std::vector<Held>*) {
          ++confirms;
          return SysError::none();
        },
        [&](Held&) { ++calls; });
    bool all_running = true;
    for (pid_t p : pids) all_running = all_running && still_running(p);
    children.stop(pids);
    if (e.err != EMFILE) return 5;
    if (std::string(e.syscall) != "pidfd_open") return 6;
    if (calls != 0 || confirms != 0) return 7;
    if (!all_running) return 8;
    return 0;
  });
  CHECK_EQ(rc, 0);
}

CHECK_MAIN()

// The cgroup tier's confirmation: a held pidfd is a member if its process
// is in the leaf now (told by the pidfd itself where the kernel can, 6.13;
// by one read of the list otherwise), or in a cgroup below it (the read).
// One outside the leaf and one that is gone are dropped; the order of the
// rest stays.
TEST(cgroup_confinement_confirms_leaf_and_nested_members_only) {
  proctree::CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children children;
  proctree::CgroupDir nested;
  CHECK_EQ(proctree::CgroupDir::create(path + "/inner", false, &nested).err, 0);
  pid_t in_leaf = children.add(fixtures::start_sleeper());
  pid_t in_nested = children.add(fixtures::start_sleeper());
  pid_t outside = children.add(fixtures::start_sleeper());
  pid_t gone = children.add(fixtures::start_sleeper());
  CHECK(in_leaf > 0 && in_nested > 0 && outside > 0 && gone > 0);
  CHECK_EQ(dir.write_file("cgroup.procs", std::to_string(in_leaf).c_str()).err, 0);
  CHECK_EQ(nested.write_file("cgroup.procs", std::to_string(in_nested).c_str()).err, 0);
  CHECK_EQ(dir.write_file("cgroup.procs", std::to_string(gone).c_str()).err, 0);
  std::vector<Held> held;
  for (pid_t p : {in_leaf, outside, gone, in_nested}) held.push_back(Held{p, proctree::pidfd_open(p)});
  for (const Held& h : held) CHECK(h.pidfd.valid());
  // Killed and reaped: its pidfd names a process that no longer is.
  kill(gone, SIGKILL);
  CHECK(children.reap(gone));

  uint64_t id = 0;
  int told = proctree::pidfd_cgroup_id(held[0].pidfd.get(), &id);
  unsigned long long leaf_id = 0;
  CHECK_EQ(proctree::cgroup_id_of(path, &leaf_id).err, 0);
  if (told == 0) {
    CHECK_EQ(id, static_cast<uint64_t>(leaf_id));
    std::printf("     the kernel tells a pidfd's cgroup (PIDFD_GET_INFO)\n");
  } else {
    CHECK_EQ(told, ENOTTY);
    std::printf("     the kernel does not tell a pidfd's cgroup: the list is read\n");
  }
  uint64_t gone_id = 0;
  CHECK(proctree::pidfd_cgroup_id(held[2].pidfd.get(), &gone_id) != 0);

  proctree::CgroupDir leaf;
  CHECK_EQ(proctree::CgroupDir::open_existing(path, &leaf).err, 0);
  proctree::CgroupConfinement confinement(std::move(leaf));
  CHECK_EQ(confinement.confirm(&held).err, 0);
  std::vector<pid_t> kept;
  for (const Held& h : held) kept.push_back(h.pid);
  CHECK(kept == std::vector<pid_t>({in_leaf, in_nested}));
  for (pid_t p : {in_leaf, in_nested, outside}) {
    kill(p, SIGKILL);
    CHECK(children.reap(p));
  }
  nested.close();
}
