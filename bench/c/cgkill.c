// The lower bound for stopping many calls at once: one write of "1" to
// cgroup.kill of the cgroup that holds every call's leaf, a wait for
// `populated 0` in its cgroup.events, then an rmdir of each (now empty)
// leaf — the same job as a supervisor's shutdown, with nothing else around
// it. The kernel SIGKILLs every process below the cgroup; the wait is
// inotify on cgroup.events (IN_MODIFY) with a 1 ms re-read besides, because
// the kernel sends at most one notification per file every 10 ms or so
// (CGROUP_FILE_NOTIFY_MIN_INTV).
//
// usage: cgkill <cgroup_dir> [leaf_dir ...]
// prints one JSON object: ms from the write to populated 0, ms for the
// rmdirs, and this process's CPU time over both.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

// 1: populated, 0: empty, -1: unreadable.
static int populated(int fd) {
  char buf[256];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n < 0) return -1;
  buf[n] = '\0';
  const char* p = strstr(buf, "populated ");
  return p ? p[10] == '1' : -1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: cgkill <cgroup_dir> [leaf_dir ...]\n");
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/cgroup.events", argv[1]);
  int events = open(path, O_RDONLY | O_CLOEXEC);
  if (events < 0) return perror(path), 1;
  int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (in < 0 || inotify_add_watch(in, path, IN_MODIFY) < 0) return perror("inotify"), 1;
  snprintf(path, sizeof path, "%s/cgroup.kill", argv[1]);
  int kill = open(path, O_WRONLY | O_CLOEXEC);
  if (kill < 0) return perror(path), 1;

  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  uint64_t t0 = now_ns();
  if (write(kill, "1", 1) != 1) return perror("cgroup.kill"), 1;
  // Bounded: 10 s.
  int state;
  while ((state = populated(events)) == 1 && now_ns() - t0 < 10000000000ULL) {
    struct pollfd p = {.fd = in, .events = POLLIN};
    if (poll(&p, 1, 1) > 0) {
      char drain[4096];
      while (read(in, drain, sizeof drain) > 0) {
      }
    }
  }
  uint64_t t1 = now_ns();
  int failed = 0;
  for (int i = 2; i < argc; ++i) {
    // EBUSY: a member's exit is still being torn down; retry briefly.
    int rc, k = 0;
    while ((rc = rmdir(argv[i])) != 0 && errno == EBUSY && k++ < 1000) usleep(100);
    if (rc != 0 && errno != ENOENT) ++failed;
  }
  uint64_t t2 = now_ns();
  getrusage(RUSAGE_SELF, &r1);
#define MS(tv) ((tv).tv_sec * 1e3 + (tv).tv_usec / 1e3)
  printf("{\"emptied\":%s,\"killToEmptyMs\":%.3f,\"rmdirMs\":%.3f,\"leaves\":%d,\"rmdirFailed\":%d,"
         "\"cpuUserMs\":%.3f,\"cpuSysMs\":%.3f}\n",
         state == 0 ? "true" : "false", (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6, argc - 2, failed,
         MS(r1.ru_utime) - MS(r0.ru_utime), MS(r1.ru_stime) - MS(r0.ru_stime));
  return state == 0 && failed == 0 ? 0 : 1;
}
