// stdio.cc: every child-side descriptor is >= 3 and close-on-exec (the
// dup sequence in the child must not clobber one with another, and nothing
// may leak into the command), pipes point the right way, and a harness with
// 0..2 closed still gets descriptors above them.
#include "kernel/stdio_pipes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <string>

#include "check.h"

using proctree::PreparedStdio;
using proctree::StdioSpec;

namespace {

bool cloexec(int fd) { return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }

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

}  // namespace

TEST(pipes_point_the_right_way) {
  StdioSpec spec[3] = {{StdioSpec::kPipe, -1}, {StdioSpec::kPipe, -1}, {StdioSpec::kPipe, -1}};
  PreparedStdio p;
  CHECK(!proctree::prepare_stdio(spec, &p));
  for (int i = 0; i < 3; ++i) {
    CHECK(p.child[i].get() >= 3);
    CHECK(p.parent[i].get() >= 3);
    CHECK(cloexec(p.child[i].get()));
    CHECK(cloexec(p.parent[i].get()));
  }
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
  StdioSpec spec[3] = {{StdioSpec::kIgnore, -1}, {StdioSpec::kInherit, -1}, {StdioSpec::kIgnore, -1}};
  PreparedStdio p;
  CHECK(!proctree::prepare_stdio(spec, &p));
  CHECK(p.child[0].get() >= 3);
  CHECK(p.child[2].get() >= 3);
  CHECK(p.child[0].get() != p.child[2].get());
  CHECK(cloexec(p.child[0].get()));
  CHECK(cloexec(p.child[2].get()));
  CHECK_EQ(target(p.child[0].get()), std::string("/dev/null"));
  CHECK_EQ(target(p.child[2].get()), std::string("/dev/null"));
  CHECK(!p.child[1].valid());
  for (int i = 0; i < 3; ++i) CHECK(!p.parent[i].valid());
}

TEST(caller_descriptor_is_duplicated_above_stdio) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  StdioSpec spec[3] = {{StdioSpec::kInherit, -1}, {StdioSpec::kFd, fds[1]}, {StdioSpec::kFd, fds[1]}};
  PreparedStdio p;
  CHECK(!proctree::prepare_stdio(spec, &p));
  for (int i = 1; i < 3; ++i) {
    CHECK(p.child[i].get() >= 3);
    CHECK(p.child[i].get() != fds[1]);
    CHECK(cloexec(p.child[i].get()));
    CHECK(same_file(p.child[i].get(), fds[1]));
    CHECK(!p.parent[i].valid());
  }
  // The caller keeps its own descriptor, untouched.
  CHECK(!cloexec(fds[1]));
  close(fds[0]);
  close(fds[1]);
}

TEST(bad_caller_descriptor_is_ebadf) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  close(fds[0]);
  close(fds[1]);  // now surely not open
  StdioSpec spec[3] = {{StdioSpec::kFd, fds[1]}, {StdioSpec::kInherit, -1}, {StdioSpec::kInherit, -1}};
  PreparedStdio p;
  proctree::SysError e = proctree::prepare_stdio(spec, &p);
  CHECK_EQ(e.err, EBADF);
  CHECK_EQ(std::string(e.syscall), std::string("fcntl"));
}

TEST(harness_with_stdio_closed_gets_descriptors_above_2) {
  int status = in_child_without_stdio([]() -> int {
    StdioSpec spec[3] = {{StdioSpec::kPipe, -1}, {StdioSpec::kIgnore, -1}, {StdioSpec::kPipe, -1}};
    PreparedStdio p;
    if (proctree::prepare_stdio(spec, &p)) return 2;
    for (int i = 0; i < 3; ++i) {
      if (p.child[i].get() < 3) return 3;
      if (p.parent[i].valid() && p.parent[i].get() < 3) return 4;
      if (!cloexec(p.child[i].get())) return 5;
    }
    // Nothing was left behind on 0..2 either.
    for (int fd = 0; fd < 3; ++fd) {
      if (fcntl(fd, F_GETFD) != -1) return 6;
    }
    return 0;
  });
  CHECK_EQ(status, 0);
}

CHECK_MAIN()
