// The kernel constants proctree needs that older libc headers may lack, in
// one place, so the build does not depend on the headers of the machine that
// compiles it (prebuilds run on kernels and libcs newer than the builder's).
#pragma once

#include <sched.h>
#include <sys/syscall.h>

#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_close_range
#define __NR_close_range 436
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace proctree {

// waitid's idtype for "the process this pidfd refers to" (Linux 5.4).
constexpr int kPidfdIdType = 3;  // P_PIDFD
// clone3: start the child in the cgroup whose directory fd is in `cgroup` (5.7).
constexpr unsigned long long kCloneIntoCgroup = 0x200000000ULL;

}  // namespace proctree
