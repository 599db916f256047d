// What the bench's C floors need of clone3 and pidfds that older libc
// headers may lack: the flags, P_PIDFD, and struct clone_args up to its
// cgroup field (Linux 5.7).
#pragma once
#include <stdint.h>

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#define CLONE_INTO_CGROUP_FLAG 0x200000000ULL
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

struct clone_args_v2 {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
