// procfs.cc: the identity fields of a process, read from /proc/<pid>/stat and
// /proc/<pid>/cmdline, compared with what the kernel reports by system call.
#include "kernel/procfs.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "check.h"

using proctree::ProcessInfo;

namespace {

// A child that sleeps in pause() until killed; optionally renamed first.
pid_t start_sleeper(const char* comm) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    if (comm) prctl(PR_SET_NAME, comm);
    close(ready[0]);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  char c;
  if (pid > 0 && read(ready[0], &c, 1) != 1) pid = -1;
  close(ready[0]);
  return pid;
}

void stop(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace

TEST(stat_of_self_matches_system_calls) {
  ProcessInfo info;
  CHECK(proctree::read_process_stat(getpid(), &info));
  CHECK_EQ(info.pid, getpid());
  CHECK_EQ(info.ppid, getppid());
  CHECK_EQ(info.pgid, getpgrp());
  CHECK_EQ(info.sid, getsid(0));
  CHECK_EQ(info.state, 'R');
  char comm[32] = {};
  prctl(PR_GET_NAME, comm);
  CHECK_EQ(info.comm, std::string(comm));
}

TEST(cmdline_is_joined_with_spaces) {
  ProcessInfo info;
  CHECK(proctree::read_process_info(getpid(), &info));
  // ctest starts us with our own path and no arguments.
  CHECK(!info.cmdline.empty());
  CHECK(info.cmdline.find("procfs_test") != std::string::npos);
  CHECK(info.cmdline.find('\0') == std::string::npos);
}

TEST(comm_with_spaces_and_parentheses) {
  // The kernel does not escape comm: "pid (a) b (c) S ..." must still parse.
  pid_t pid = start_sleeper("a) b (c");
  CHECK(pid > 0);
  ProcessInfo info;
  bool ok = proctree::read_process_stat(pid, &info);
  stop(pid);
  CHECK(ok);
  CHECK_EQ(info.comm, std::string("a) b (c"));
  CHECK_EQ(info.ppid, getpid());
  CHECK(info.state == 'S' || info.state == 'R');
}

TEST(new_session_shows_in_sid_and_pgid) {
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    setsid();
    close(ready[0]);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  char c;
  CHECK(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  ProcessInfo info;
  bool ok = proctree::read_process_stat(pid, &info);
  stop(pid);
  CHECK(ok);
  CHECK_EQ(info.sid, pid);
  CHECK_EQ(info.pgid, pid);
}

TEST(zombie_has_state_z_and_no_cmdline) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  CHECK(pid > 0);
  siginfo_t si{};
  // Wait for the exit without reaping it.
  waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOWAIT);
  ProcessInfo info;
  bool ok = proctree::read_process_info(pid, &info);
  waitpid(pid, nullptr, 0);
  CHECK(ok);
  CHECK_EQ(info.state, 'Z');
  CHECK_EQ(info.cmdline, std::string());
}

TEST(gone_process_reads_false) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  CHECK(pid > 0);
  waitpid(pid, nullptr, 0);
  ProcessInfo info;
  CHECK(!proctree::read_process_stat(pid, &info));
  CHECK(!proctree::read_process_info(pid, &info));
}

// start_time (field 22, clock ticks after boot) tells a process from a later
// one that got the same number: a child never starts before its parent.
TEST(start_time_is_field_22_and_orders_parent_and_child) {
  ProcessInfo self;
  CHECK(proctree::read_process_stat(getpid(), &self));
  CHECK(self.start_time > 0);
  pid_t pid = start_sleeper(nullptr);
  CHECK(pid > 0);
  ProcessInfo child;
  bool ok = proctree::read_process_stat(pid, &child);
  // The same field, read by hand.
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = fopen(path, "re");
  char buf[1024] = {};
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  stop(pid);
  CHECK(ok);
  CHECK(n > 0);
  const char* p = strrchr(buf, ')');
  CHECK(p != nullptr);
  // Fields 3.. follow ") "; field 22 is the 20th of them.
  unsigned long long by_hand = 0;
  int field = 2;
  for (const char* q = p + 1; *q && field < 22; ++q) {
    if (*q == ' ') {
      ++field;
      if (field == 22) by_hand = strtoull(q + 1, nullptr, 10);
    }
  }
  CHECK_EQ(child.start_time, by_hand);
  CHECK(child.start_time >= self.start_time);
}

CHECK_MAIN()
