// The process's table of descriptors. The kernel grows it by doubling when a
// descriptor is wanted past its end, and in a process of more than one
// thread each growth waits for an RCU grace period (expand_fdtable() calls
// synchronize_rcu()): 5-18 ms measured on these machines, on whichever
// thread opened that descriptor. Node starts with room for 256, so a pass
// that holds 1024 pidfds waited three times (27 ms of a first terminate()
// of a 1000-process tree), and the JavaScript thread stalls for one grace
// period at its 257th, 513th ... descriptor. The table never shrinks, so
// growing it once, ahead and off that thread, spares every later opener.
#pragma once

namespace proctree {

// Grows the table, if it is smaller, to hold descriptors below `below`
// (clamped to RLIMIT_NOFILE), in one growth, by duplicating `fd` there and
// closing the duplicate. `fd` must be one of our own on a file nobody
// locks: closing any descriptor of a file drops the process's POSIX locks
// on it. Returns the bound now known to fit (0: could not tell).
int grow_fd_table(int fd, int below);

}  // namespace proctree
