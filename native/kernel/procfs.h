// What /proc says about one process: the identity fields a CleanupReport and
// a 'leftover' event name (pid, ppid, pgid, sid, comm, cmdline).
#pragma once

#include <sys/types.h>

#include <string>

namespace proctree {

struct ProcessInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  char state = '?';
  unsigned long long start_time = 0;  // clock ticks after boot (field 22 of stat)
  std::string comm;
  std::string cmdline;  // arguments joined by spaces; empty for kernel threads and zombies
};

// false when the process is gone.
bool read_process_stat(pid_t pid, ProcessInfo* out);
bool read_process_info(pid_t pid, ProcessInfo* out);
// Fills cmdline alone (empty when the process is gone). Its read takes the
// process's mm lock, and can wait while the process is in exec or mmap: the
// stat fields alone never do.
void read_process_cmdline(pid_t pid, ProcessInfo* out);

// True while a debugger or tracer (ptrace) is attached to this process's
// main thread. Freezing a cgroup that holds our tracer would stop us at our
// next traced syscall until the thaw we could then never write, so every
// freeze asks this first and goes without when it is true.
bool self_is_traced();

}  // namespace proctree
