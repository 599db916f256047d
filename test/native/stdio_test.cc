// stdio_fds.cc: every descriptor the child is handed sits at or above the
// number of fds it gets (the dup sequence in the child must not clobber one
// with another) and, when we made it, is close-on-exec (nothing may leak into
// the command); pipes point the right way; kClose and kInherit carry no
// descriptor; a pty is one master and one slave for 0..2; a harness with 0..2
// closed still gets descriptors above them; and on error nothing stays open.
#include "kernel/stdio_fds.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <string>

#include "check.h"
#include "kernel/child.h"

using proctree::PreparedStdio;
using proctree::PtySize;
using proctree::StdioSpec;

namespace {

bool cloexec(int fd) { return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }
bool nonblocking(int fd) { return (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0; }

std::string target(int fd) {
  char link[64], buf[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, buf, sizeof buf - 1);
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

bool same_file(int a, int b) {
  struct stat sa, sb;
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int count_open_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') ++n;
  }
  closedir(d);
  return n - 1;  // the directory's own descriptor
}

// Runs fn in a forked child whose 0..2 are closed; the exit status is the result.
int in_child_without_stdio(int (*fn)()) {
  pid_t pid = fork();
  if (pid == 0) {
    close(0);
    close(1);
    close(2);
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

std::vector<StdioSpec> three(StdioSpec::Kind a, StdioSpec::Kind b, StdioSpec::Kind c) {
  return {StdioSpec{a, -1}, StdioSpec{b, -1}, StdioSpec{c, -1}};
}

}  // namespace

TEST(pipes_point_the_right_way) {
  PreparedStdio p;
  CHECK(!proctree::prepare_stdio(three(StdioSpec::kPipe, StdioSpec::kPipe, StdioSpec::kPipe), PtySize{}, &p));
  CHECK_EQ(p.fds.size(), size_t{3});
  for (int i = 0; i < 3; ++i) {
    CHECK(p.child[i].get() >= 3);
    CHECK_EQ(p.fds[i], p.child[i].get());
    CHECK(p.parent[i].get() >= 3);
    CHECK(cloexec(p.child[i].get()));
    CHECK(cloexec(p.parent[i].get()));
  }
  CHECK(!p.pty_master.valid());
  CHECK(!p.controlling_tty);
  // stdin: the harness writes, the child reads.
  CHECK(write(p.parent[0].get(), "in", 2) == 2);
  char buf[8] = {};
  CHECK(read(p.child[0].get(), buf, sizeof buf) == 2);
  CHECK_EQ(std::string(buf, 2), std::string("in"));
  // stdout and stderr: the child writes, the harness reads.
  for (int i = 1; i < 3; ++i) {
    CHECK(write(p.child[i].get(), "out", 3) == 3);
    memset(buf, 0, sizeof buf);
    CHECK(read(p.parent[i].get(), buf, sizeof buf) == 3);
    CHECK_EQ(std::string(buf, 3), std::string("out"));
  }
}

TEST(ignore_is_dev_null_and_inherit_is_nothing) {
  PreparedStdio p;
  CHECK(!proctree::prepare_stdio(three(StdioSpec::kIgnore, StdioSpec::kInherit, StdioSpec::kIgnore), PtySize{}, &p));
  // /dev/null: one descriptor of ours, above 2, close-on-exec, shared by
  // every call (nothing to close per call).
  CHECK(p.fds[0] >= 3);
  CHECK(p.fds[2] >= 3);
  CHECK(cloexec(p.fds[0]));
  CHECK(cloexec(p.fds[2]));
  CHECK_EQ(target(p.fds[0]), std::string("/dev/null"));
  CHECK_EQ(target(p.fds[2]), std::string("/dev/null"));
  CHECK_EQ(p.fds[0], proctree::dev_null_fd());
  CHECK_EQ(p.fds[1], proctree::kInherit);
  CHECK(!p.child[1].valid());
  for (int i = 0; i < 3; ++i) CHECK(!p.parent[i].valid());
}

TEST(ignore_below_the_fd_count_gets_its_own_copy_above_it) {
  // With more fds than /dev/null's number, /dev/null itself would be
  // clobbered by a dup in the child: it is duplicated above them.
  const int n = proctree::dev_null_fd() + 2;
  std::vector<StdioSpec> spec(static_cast<size_t>(n), StdioSpec{StdioSpec::kIgnore, -1});
  PreparedStdio p;
  CHECK(!proctree::prepare_stdio(spec, PtySize{}, &p));
  for (int i = 0; i < n; ++i) {
    CHECK(p.fds[i] >= n);
    CHECK(cloexec(p.fds[i]));
    CHECK_EQ(target(p.fds[i]), std::string("/dev/null"));
  }
}

TEST(close_is_kclosed) {
  PreparedStdio p;
  CHECK(!proctree::prepare_stdio(three(StdioSpec::kClose, StdioSpec::kIgnore, StdioSpec::kClose), PtySize{}, &p));
  CHECK_EQ(p.fds[0], proctree::kClosed);
  CHECK_EQ(p.fds[2], proctree::kClosed);
  CHECK(!p.child[0].valid());
  CHECK(!p.child[2].valid());
}

TEST(caller_descriptor_is_passed_on_above_stdio) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  CHECK(fds[1] >= 3);
  PreparedStdio p;
  std::vector<StdioSpec> spec = {{StdioSpec::kInherit, -1}, {StdioSpec::kFd, fds[1]}, {StdioSpec::kFd, fds[1]}};
  CHECK(!proctree::prepare_stdio(spec, PtySize{}, &p));
  for (int i = 1; i < 3; ++i) {
    CHECK(p.fds[i] >= 3);
    CHECK(same_file(p.fds[i], fds[1]));
    CHECK(!p.parent[i].valid());
  }
  // The caller keeps its own descriptor, untouched.
  CHECK(!cloexec(fds[1]));
  close(fds[0]);
  close(fds[1]);
}

TEST(caller_descriptor_below_the_fd_count_is_duplicated_above_it) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  // Eight fds: the caller's descriptor (a small number) would be clobbered
  // by the child's dups, so it is duplicated above 7, close-on-exec.
  const int n = fds[1] + 2;
  std::vector<StdioSpec> spec(static_cast<size_t>(n), StdioSpec{StdioSpec::kInherit, -1});
  spec[1] = {StdioSpec::kFd, fds[1]};
  spec[static_cast<size_t>(n) - 1] = {StdioSpec::kFd, fds[1]};
  PreparedStdio p;
  CHECK(!proctree::prepare_stdio(spec, PtySize{}, &p));
  for (int i : {1, n - 1}) {
    CHECK(p.fds[i] >= n);
    CHECK(p.fds[i] != fds[1]);
    CHECK(cloexec(p.fds[i]));
    CHECK(same_file(p.fds[i], fds[1]));
    CHECK_EQ(p.child[i].get(), p.fds[i]);
  }
  CHECK(!cloexec(fds[1]));
  close(fds[0]);
  close(fds[1]);
}

TEST(bad_caller_descriptor_is_ebadf) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  close(fds[0]);
  close(fds[1]);  // now surely not open
  PreparedStdio p;
  std::vector<StdioSpec> spec = {{StdioSpec::kFd, fds[1]}, {StdioSpec::kInherit, -1}, {StdioSpec::kInherit, -1}};
  proctree::SysError e = proctree::prepare_stdio(spec, PtySize{}, &p);
  CHECK_EQ(e.err, EBADF);
  CHECK_EQ(std::string(e.syscall), std::string("fcntl"));
}

TEST(pty_is_one_terminal_for_0_to_2) {
  PreparedStdio p;
  PtySize size;
  size.cols = 132;
  size.rows = 43;
  CHECK(!proctree::prepare_stdio(three(StdioSpec::kPty, StdioSpec::kPty, StdioSpec::kPty), size, &p));
  CHECK(p.controlling_tty);
  CHECK(p.pty_master.valid());
  CHECK(p.pty_master.get() >= 3);
  CHECK(cloexec(p.pty_master.get()));
  CHECK(nonblocking(p.pty_master.get()));
  // One slave for all three, owned by `child`, above the fd count.
  CHECK(p.fds[0] >= 3);
  CHECK_EQ(p.fds[1], p.fds[0]);
  CHECK_EQ(p.fds[2], p.fds[0]);
  CHECK(cloexec(p.fds[0]));
  CHECK(isatty(p.fds[0]));
  CHECK_EQ(target(p.fds[0]).compare(0, 9, "/dev/pts/"), 0);
  bool owned = false;
  for (const proctree::Fd& fd : p.child) owned = owned || fd.get() == p.fds[0];
  CHECK(owned);
  for (int i = 0; i < 3; ++i) CHECK(!p.parent[i].valid());
  // The master's size is the one asked for; the slave is that master's.
  winsize ws{};
  CHECK_EQ(ioctl(p.fds[0], TIOCGWINSZ, &ws), 0);
  CHECK_EQ(ws.ws_col, 132);
  CHECK_EQ(ws.ws_row, 43);
  char name[128];
  CHECK_EQ(ptsname_r(p.pty_master.get(), name, sizeof name), 0);
  CHECK_EQ(target(p.fds[0]), std::string(name));
  // Not our controlling terminal (O_NOCTTY): the command's session takes it.
  CHECK(tcgetsid(p.fds[0]) < 0);
}

TEST(pty_beyond_stdio_is_refused_and_leaves_nothing_open) {
  int before = count_open_fds();
  std::vector<StdioSpec> spec = {
      {StdioSpec::kPipe, -1}, {StdioSpec::kPipe, -1}, {StdioSpec::kPipe, -1}, {StdioSpec::kPty, -1}};
  PreparedStdio p;
  proctree::SysError e = proctree::prepare_stdio(spec, PtySize{}, &p);
  CHECK_EQ(e.err, EINVAL);
  CHECK_EQ(count_open_fds(), before);
}

TEST(error_part_way_leaves_nothing_open) {
  // 64 fds: two pipes made (lifted above 63), then a descriptor below the
  // fd count that is not open (so it is duplicated, and that fails): the
  // pipes must be closed again.
  const int bad = 60;
  CHECK(fcntl(bad, F_GETFD) == -1);
  int before = count_open_fds();
  std::vector<StdioSpec> spec(64, StdioSpec{StdioSpec::kInherit, -1});
  spec[0] = {StdioSpec::kPipe, -1};
  spec[1] = {StdioSpec::kPipe, -1};
  spec[63] = {StdioSpec::kFd, bad};
  PreparedStdio p;
  proctree::SysError e = proctree::prepare_stdio(spec, PtySize{}, &p);
  CHECK_EQ(e.err, EBADF);
  CHECK_EQ(count_open_fds(), before);
}

TEST(harness_with_stdio_closed_gets_descriptors_above_2) {
  int status = in_child_without_stdio([]() -> int {
    PreparedStdio p;
    if (proctree::prepare_stdio(three(StdioSpec::kPipe, StdioSpec::kIgnore, StdioSpec::kPipe), PtySize{}, &p)) return 2;
    for (int i = 0; i < 3; ++i) {
      if (p.fds[i] < 3) return 3;
      if (p.parent[i].valid() && p.parent[i].get() < 3) return 4;
      if (!cloexec(p.fds[i])) return 5;
    }
    // Nothing was left behind on 0..2 either.
    for (int fd = 0; fd < 3; ++fd) {
      if (fcntl(fd, F_GETFD) != -1) return 6;
    }
    return 0;
  });
  CHECK_EQ(status, 0);
}

TEST(harness_with_stdio_closed_gets_a_pty_above_2) {
  int status = in_child_without_stdio([]() -> int {
    PreparedStdio p;
    if (proctree::prepare_stdio(three(StdioSpec::kPty, StdioSpec::kPty, StdioSpec::kPty), PtySize{}, &p)) return 2;
    if (p.fds[0] < 3 || p.pty_master.get() < 3) return 3;
    for (int fd = 0; fd < 3; ++fd) {
      if (fcntl(fd, F_GETFD) != -1) return 6;
    }
    return 0;
  });
  CHECK_EQ(status, 0);
}

CHECK_MAIN()
