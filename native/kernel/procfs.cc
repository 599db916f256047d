#include "kernel/procfs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernel/fd.h"

namespace proctree {
namespace {

ssize_t read_proc_file(pid_t pid, const char* name, char* buf, size_t size) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", static_cast<int>(pid), name);
  Fd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return -1;
  size_t total = 0;
  while (total < size) {
    ssize_t n = read(fd.get(), buf + total, size - total);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) break;
    total += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(total);
}

}  // namespace

bool read_process_stat(pid_t pid, ProcessInfo* out) {
  char buf[1024];
  ssize_t n = read_proc_file(pid, "stat", buf, sizeof buf - 1);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "pid (comm) state ppid pgrp session ...": comm may hold spaces and
  // parentheses, so it ends at the last ')'.
  char* open_paren = strchr(buf, '(');
  char* close_paren = strrchr(buf, ')');
  if (!open_paren || !close_paren || close_paren < open_paren) return false;
  out->pid = pid;
  out->comm.assign(open_paren + 1, static_cast<size_t>(close_paren - open_paren - 1));
  char state = '?';
  int ppid = 0, pgid = 0, sid = 0;
  unsigned long long start = 0;
  // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
  // utime stime cutime cstime priority nice num_threads itrealvalue starttime
  if (sscanf(close_paren + 1, " %c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &state, &ppid, &pgid, &sid, &start) != 5) {
    return false;
  }
  out->start_time = start;
  out->state = state;
  out->ppid = ppid;
  out->pgid = pgid;
  out->sid = sid;
  return true;
}

bool read_process_info(pid_t pid, ProcessInfo* out) {
  if (!read_process_stat(pid, out)) return false;
  read_process_cmdline(pid, out);
  return true;
}

void read_process_cmdline(pid_t pid, ProcessInfo* out) {
  char buf[4096];
  ssize_t n = read_proc_file(pid, "cmdline", buf, sizeof buf);
  out->cmdline.clear();
  if (n > 0) {
    size_t len = static_cast<size_t>(n);
    while (len > 0 && buf[len - 1] == '\0') --len;
    for (size_t i = 0; i < len; ++i) {
      if (buf[i] == '\0') buf[i] = ' ';
    }
    out->cmdline.assign(buf, len);
  }
}

bool self_is_traced() {
  // /proc/self, not /proc/<getpid()>: in a PID namespace whose /proc was not
  // remounted, our number there is someone else's.
  char buf[4096];
  Fd fd(open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  ssize_t n;
  do {
    n = read(fd.get(), buf, sizeof buf - 1);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* at = strstr(buf, "\nTracerPid:");
  return at != nullptr && strtol(at + strlen("\nTracerPid:"), nullptr, 10) != 0;
}

}  // namespace proctree
