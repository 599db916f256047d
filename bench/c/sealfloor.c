// The lower bound for a sealed call (README "Sealed calls"): what the kernel
// needs for the namespaces alone, in a tight C loop with nothing else around
// it. Per iteration: a cgroup leaf made (mkdir), then clone3(CLONE_NEWUSER|
// CLONE_NEWPID|CLONE_NEWNS|CLONE_PIDFD|CLONE_INTO_CGROUP); the child maps its
// own uid and gid to themselves, unshares a cgroup namespace, makes its
// mounts private, mounts a proc and a cgroup2 of its own, forks the command
// (the namespace's init stays, as a sealed call's shim does), waits for it
// and exits; the parent waits (waitid P_PIDFD) and removes the leaf.
//
// usage: sealfloor <iterations> <cgroup_parent> <file>
// prints one JSON object: per-call latencies in ms (clone3 to the reaped
// init), this process's CPU time over the loop and its children's.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clone3.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double cpu_us(int who) {
  struct rusage r;
  getrusage(who, &r);
  return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
}

static int write_file(const char* path, const char* text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

// The namespace's init: the steps a sealed call's shim takes, then the command.
static void init(const char* file, uid_t uid, gid_t gid) {
  char map[64];
  if (write_file("/proc/self/setgroups", "deny") != 0) _exit(120);
  snprintf(map, sizeof map, "%u %u 1\n", uid, uid);
  if (write_file("/proc/self/uid_map", map) != 0) _exit(121);
  snprintf(map, sizeof map, "%u %u 1\n", gid, gid);
  if (write_file("/proc/self/gid_map", map) != 0) _exit(122);
  if (unshare(CLONE_NEWCGROUP) != 0) _exit(123);
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) _exit(124);
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) _exit(125);
  if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) _exit(126);
  pid_t pid = fork();
  if (pid < 0) _exit(127);
  if (pid == 0) {
    execl(file, file, (char*)NULL);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: sealfloor <iterations> <cgroup_parent> <file>\n");
    return 2;
  }
  const int n = atoi(argv[1]);
  const char* parent = argv[2];
  const char* file = argv[3];
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  double* ms = calloc((size_t)n, sizeof *ms);
  const double self0 = cpu_us(RUSAGE_SELF), kids0 = cpu_us(RUSAGE_CHILDREN);
  const double wall0 = now_ms();
  for (int i = 0; i < n; ++i) {
    char leaf[4096];
    snprintf(leaf, sizeof leaf, "%s/proctree-bench-sealfloor-%d-%d", parent, (int)getpid(), i);
    const double t0 = now_ms();
    if (mkdir(leaf, 0755) != 0) {
      perror("mkdir");
      return 1;
    }
    int dirfd = open(leaf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int pidfd = -1;
    struct clone_args_v2 ca;
    memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_PIDFD | CLONE_INTO_CGROUP_FLAG;
    ca.pidfd = (uint64_t)(uintptr_t)&pidfd;
    ca.exit_signal = SIGCHLD;
    ca.cgroup = (uint64_t)dirfd;
    long pid = syscall(SYS_clone3, &ca, sizeof ca);
    if (pid < 0) {
      perror("clone3");
      return 1;
    }
    if (pid == 0) init(file, uid, gid);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    while (waitid(P_PIDFD, pidfd, &si, WEXITED) < 0 && errno == EINTR) {
    }
    if (si.si_code != CLD_EXITED || si.si_status != 0) {
      fprintf(stderr, "sealfloor: the init ended with code %d status %d\n", si.si_code, si.si_status);
      return 1;
    }
    close(pidfd);
    close(dirfd);
    for (int k = 0; k < 1000 && rmdir(leaf) != 0 && errno == EBUSY; ++k) usleep(100);
    ms[i] = now_ms() - t0;
  }
  const double wall = now_ms() - wall0;
  printf("{\"exitMs\":[");
  for (int i = 0; i < n; ++i) printf("%s%.4f", i ? "," : "", ms[i]);
  printf("],\"wallMs\":%.3f,\"selfCpuUs\":%.1f,\"childCpuUs\":%.1f}\n", wall, cpu_us(RUSAGE_SELF) - self0,
         cpu_us(RUSAGE_CHILDREN) - kids0);
  return 0;
}
