// The lower bound for starting a command: clone3(CLONE_VM|CLONE_VFORK|
// CLONE_PIDFD[|CLONE_INTO_CGROUP]) + execve + waitid(P_PIDFD) in a tight C
// loop, with nothing else around it. Optionally with a cgroup leaf made
// (mkdir) before and removed (rmdir) after each command, which is the least a
// per-call cgroup costs.
//
// usage: floor <iterations> <concurrency> <rss_mb> <cgroup_parent|-> <file> [open_fds]
// open_fds: hold that many more descriptors open (close-on-exec, as every fd
// node opens), so that the fd table each clone copies and each exec closes
// is as large as a harness's with that many fds.
// prints one JSON object: per-call latencies (concurrency 1 only), wall time,
// this process's CPU time over the loop (getrusage before and after it, so
// its own start-up is not counted) and its reaped children's.
//
// FLOOR_SIGCHLD=1 in the environment: it also handles SIGCHLD as libuv does
// while a harness has a child_process child alive, which every exit of any
// child of the harness then costs: a handler that writes to a pipe, the
// pipe read until empty, and a waitpid(WNOHANG) of each child of its own
// (one here: a child kept alive through the loop). Linux sends SIGCHLD for
// every command: exec resets a child's exit signal to SIGCHLD, whatever its
// clone asked for.
//
// At concurrency 1 it blocks in waitid(P_PIDFD), the least there is. Above,
// it keeps that many commands in flight and waits the way an event loop
// must, since a harness has other fds to serve: every pidfd in one epoll
// set, epoll_wait, then waitid(P_PIDFD) on the ones that turned readable.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clone3.h"

// clone3 with a child stack: the child starts on the new stack with no frame to
// return to, so it must call fn without touching the parent's stack.
long floor_clone3(struct clone_args_v2* args, size_t size, int (*fn)(void*), void* arg);
#if defined(__x86_64__)
__asm__(
    ".text\n.globl floor_clone3\n.type floor_clone3,@function\nfloor_clone3:\n"
    "  mov %rcx, %r8\n  mov $435, %eax\n  syscall\n  test %rax, %rax\n  jz 1f\n  ret\n"
    "1:\n  xor %ebp, %ebp\n  and $-16, %rsp\n  mov %r8, %rdi\n  call *%rdx\n"
    "  mov %eax, %edi\n  mov $60, %eax\n  syscall\n  hlt\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n.globl floor_clone3\n.type floor_clone3,%function\nfloor_clone3:\n"
    "  mov x8, #435\n  svc #0\n  cbz x0, 1f\n  ret\n"
    "1:\n  mov x29, #0\n  mov x30, #0\n  mov x0, x3\n  blr x2\n  mov x8, #93\n  svc #0\n  brk #0\n");
#else
#error "x86_64 and aarch64 only"
#endif

extern char** environ;
static const char* g_file;

static int child_exec(void* unused) {
  (void)unused;
  char* argv[] = {(char*)g_file, NULL};
  syscall(SYS_execve, g_file, argv, environ);
  syscall(SYS_exit, 127);
  return 127;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

struct slot {
  pid_t pid;
  int pidfd;
  char leaf[512];
};

static char* g_stack;
static const size_t kStack = 64 * 1024;
static const char* g_parent;  // NULL: no cgroup
static unsigned long g_seq;
static int g_pid;
static int g_sigchld_pipe[2] = {-1, -1};
static pid_t g_keeper;

static void on_sigchld(int sig) {
  (void)sig;
  int saved = errno;
  char one = 1;
  (void)!write(g_sigchld_pipe[1], &one, 1);
  errno = saved;
}

// What libuv does on the event loop after a SIGCHLD.
static void after_sigchld(void) {
  if (g_keeper <= 0) return;
  char buf[64];
  while (read(g_sigchld_pipe[0], buf, sizeof buf) > 0) {
  }
  int status;
  (void)waitpid(g_keeper, &status, WNOHANG);
}

static int handle_sigchld(void) {
  if (pipe2(g_sigchld_pipe, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_RESTART;
  sigfillset(&sa.sa_mask);
  if (sigaction(SIGCHLD, &sa, NULL) != 0) return -1;
  g_keeper = fork();
  if (g_keeper < 0) return -1;
  if (g_keeper == 0) {
    for (;;) pause();
  }
  return 0;
}

static int start(struct slot* s) {
  int dirfd = -1;
  s->leaf[0] = '\0';
  if (g_parent) {
    snprintf(s->leaf, sizeof s->leaf, "%s/proctree-bench-floor-%d-%lu", g_parent, g_pid, g_seq++);
    if (mkdir(s->leaf, 0755) != 0) return -errno;
    dirfd = open(s->leaf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) return -errno;
  }
  struct clone_args_v2 ca;
  memset(&ca, 0, sizeof ca);
  int pidfd = -1;
  ca.flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD;
  ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
  ca.exit_signal = SIGCHLD;
  ca.stack = (uint64_t)(uintptr_t)g_stack;
  ca.stack_size = kStack;
  if (dirfd >= 0) {
    ca.flags |= CLONE_INTO_CGROUP_FLAG;
    ca.cgroup = (uint64_t)dirfd;
  }
  long pid = floor_clone3(&ca, sizeof ca, child_exec, NULL);
  if (dirfd >= 0) close(dirfd);
  if (pid < 0) return (int)pid;
  s->pid = (pid_t)pid;
  s->pidfd = pidfd;
  return 0;
}

static void finish(struct slot* s) {
  close(s->pidfd);
  if (s->leaf[0]) {
    // The reaped child has left the cgroup already; EBUSY would be a kernel
    // that is still tearing it down, so retry briefly.
    for (int i = 0; i < 1000 && rmdir(s->leaf) != 0 && errno == EBUSY; ++i) usleep(100);
  }
}

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    fprintf(stderr, "usage: floor <iterations> <concurrency> <rss_mb> <cgroup_parent|-> <file> [open_fds]\n");
    return 2;
  }
  long iters = atol(argv[1]);
  long conc = atol(argv[2]);
  long rss_mb = atol(argv[3]);
  g_parent = strcmp(argv[4], "-") == 0 ? NULL : argv[4];
  g_file = argv[5];
  g_pid = (int)getpid();
  long open_fds = argc == 7 ? atol(argv[6]) : 0;
  if (iters < 1 || iters > 100000 || conc < 1 || conc > 256 || rss_mb < 0 || rss_mb > 65536) return 2;
  if (open_fds < 0 || open_fds > 1000000) return 2;
  if (open_fds > 0) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      setrlimit(RLIMIT_NOFILE, &rl);
    }
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (long i = 0; null >= 0 && i < open_fds; ++i) {
      if (fcntl(null, F_DUPFD_CLOEXEC, 0) < 0) return perror("open_fds"), 3;
    }
  }

  // Grow this process to the harness size under test; touched, so it is real.
  if (rss_mb > 0) {
    size_t bytes = (size_t)rss_mb << 20;
    char* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 3;
    memset(m, 0x5a, bytes);
  }
  const char* sigchld = getenv("FLOOR_SIGCHLD");
  if (sigchld && strcmp(sigchld, "1") == 0 && handle_sigchld() != 0) return perror("sigchld"), 3;
  g_stack = mmap(NULL, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (g_stack == MAP_FAILED) return 3;

  double* spawn_us = calloc((size_t)iters, sizeof(double));
  double* exit_us = calloc((size_t)iters, sizeof(double));
  struct slot* slots = calloc((size_t)conc, sizeof(struct slot));
  if (!spawn_us || !exit_us || !slots) return 3;

  struct rusage self0, kids0;
  getrusage(RUSAGE_SELF, &self0);
  getrusage(RUSAGE_CHILDREN, &kids0);
  uint64_t t_start = now_ns();
  if (conc == 1) {
    for (long i = 0; i < iters; ++i) {
      uint64_t t0 = now_ns();
      int e = start(&slots[0]);
      if (e < 0) {
        fprintf(stderr, "spawn: %s\n", strerror(-e));
        return 1;
      }
      uint64_t t1 = now_ns();
      siginfo_t info;
      while (waitid((idtype_t)P_PIDFD, (id_t)slots[0].pidfd, &info, WEXITED) < 0 && errno == EINTR) {
      }
      after_sigchld();
      finish(&slots[0]);
      uint64_t t2 = now_ns();
      spawn_us[i] = (double)(t1 - t0) / 1e3;
      exit_us[i] = (double)(t2 - t0) / 1e3;
    }
  } else {
    // Keep `conc` commands in flight: reap the ones whose pidfd is readable,
    // start as many again.
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return 1;
    struct epoll_event* ready = calloc((size_t)conc, sizeof(struct epoll_event));
    if (!ready) return 3;
    long started = 0, done = 0, live = 0;
    while (done < iters) {
      for (long k = 0; k < conc && live < conc && started < iters; ++k) {
        if (slots[k].pid != 0) continue;
        int e = start(&slots[k]);
        if (e < 0) {
          fprintf(stderr, "spawn: %s\n", strerror(-e));
          return 1;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)k};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, slots[k].pidfd, &ev) != 0) return 1;
        ++started;
        ++live;
      }
      int n = epoll_wait(ep, ready, (int)conc, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return 1;
      }
      for (int r = 0; r < n; ++r) {
        struct slot* s = &slots[ready[r].data.u64];
        if (s->pid == 0) continue;
        siginfo_t info;
        memset(&info, 0, sizeof info);
        while (waitid((idtype_t)P_PIDFD, (id_t)s->pidfd, &info, WEXITED) < 0 && errno == EINTR) {
        }
        // Out of the set before the close: a close alone does not remove it
        // while a child that has not finished its exec still holds a copy of
        // the fd (the vfork parent resumes before close-on-exec runs), and
        // the stale entry would report this slot again.
        epoll_ctl(ep, EPOLL_CTL_DEL, s->pidfd, NULL);
        after_sigchld();
        finish(s);
        s->pid = 0;
        --live;
        ++done;
      }
    }
    close(ep);
  }
  uint64_t wall = now_ns() - t_start;
  if (g_keeper > 0) {
    kill(g_keeper, SIGKILL);
    while (waitpid(g_keeper, NULL, 0) < 0 && errno == EINTR) {
    }
  }

  struct rusage self1, kids1;
  getrusage(RUSAGE_SELF, &self1);
  getrusage(RUSAGE_CHILDREN, &kids1);
#define MS(tv) ((tv).tv_sec * 1e3 + (tv).tv_usec / 1e3)
  printf("{\"iterations\":%ld,\"concurrency\":%ld,\"cgroup\":%s,\"wallMs\":%.3f,", iters, conc,
         g_parent ? "true" : "false", (double)wall / 1e6);
  printf("\"cpuUserMs\":%.3f,\"cpuSysMs\":%.3f,\"childCpuUserMs\":%.3f,\"childCpuSysMs\":%.3f,",
         MS(self1.ru_utime) - MS(self0.ru_utime), MS(self1.ru_stime) - MS(self0.ru_stime),
         MS(kids1.ru_utime) - MS(kids0.ru_utime), MS(kids1.ru_stime) - MS(kids0.ru_stime));
  printf("\"spawnMs\":[");
  for (long i = 0; conc == 1 && i < iters; ++i) printf("%s%.4f", i ? "," : "", spawn_us[i] / 1e3);
  printf("],\"exitMs\":[");
  for (long i = 0; conc == 1 && i < iters; ++i) printf("%s%.4f", i ? "," : "", exit_us[i] / 1e3);
  printf("]}\n");
  return 0;
}
