// Process trees for the bench, each process bounded in lifetime (alarm) so
// nothing it starts can outlive the bench by more than a few minutes.
//
//   tree <n> <fanout> <term|ignore>   n processes in a tree of the given fan-out,
//                                     all waiting; `ignore` ignores SIGTERM.
//   chain <depth>                     each process forks the next, which calls
//                                     setsid(): depth+1 processes, depth sessions.
//   forker <interval_us> <max> <max_ms> <countfile>
//                                     this process waits; one child forks a
//                                     waiting grandchild every interval_us, at
//                                     most max of them and for at most max_ms,
//                                     writing how many it has forked to countfile.
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned g_lifetime_s = 120;

static void wait_forever(void) {
  alarm(g_lifetime_s);  // SIGALRM's default action ends the process
  for (;;) pause();
}

// This process is node `lo` of the range [lo, hi): split the rest into up to
// `fanout` subtrees, one child each.
static void build(long lo, long hi, long fanout) {
  long rest = hi - lo - 1;
  long next = lo + 1;
  for (long k = 0; k < fanout && rest > 0; ++k) {
    long size = rest / (fanout - k) + (rest % (fanout - k) ? 1 : 0);
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid == 0) {
      build(next, next + size, fanout);
      return;
    }
    next += size;
    rest -= size;
  }
}

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int main(int argc, char** argv) {
  const char* life = getenv("BENCH_TREE_LIFETIME_S");
  if (life && atoi(life) > 0) g_lifetime_s = (unsigned)atoi(life);
  alarm(g_lifetime_s);

  if (argc == 5 && strcmp(argv[1], "tree") == 0) {
    long n = atol(argv[2]), fanout = atol(argv[3]);
    if (n < 1 || n > 5000 || fanout < 1) return 2;
    if (strcmp(argv[4], "ignore") == 0) signal(SIGTERM, SIG_IGN);
    build(0, n, fanout);
    wait_forever();
  }
  if (argc == 3 && strcmp(argv[1], "chain") == 0) {
    long depth = atol(argv[2]);
    if (depth < 0 || depth > 100) return 2;
    for (long d = 0; d < depth; ++d) {
      pid_t pid = fork();
      if (pid != 0) break;  // the parent (or a failed fork) stays at this depth
      setsid();
    }
    wait_forever();
  }
  if (argc == 6 && strcmp(argv[1], "forker") == 0) {
    long interval_us = atol(argv[2]), max = atol(argv[3]), max_ms = atol(argv[4]);
    if (interval_us < 100 || max < 0 || max > 5000 || max_ms < 0 || max_ms > 60000) return 2;
    int fd = open(argv[5], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return 2;
    if (fork() != 0) wait_forever();
    alarm(g_lifetime_s);
    long start = now_ms(), count = 0;
    struct timespec pause_ts = {0, interval_us * 1000L};
    while (count < max && now_ms() - start < max_ms) {
      pid_t pid = fork();
      if (pid == 0) wait_forever();
      if (pid > 0) {
        ++count;
        char buf[32];
        int len = snprintf(buf, sizeof buf, "%ld\n", count);
        if (pwrite(fd, buf, (size_t)len, 0) < 0) break;
      }
      nanosleep(&pause_ts, NULL);
    }
    wait_forever();
  }
  fprintf(stderr,
          "usage: tree tree <n> <fanout> <term|ignore> | chain <depth> |"
          " forker <interval_us> <max> <max_ms> <countfile>\n");
  return 2;
}
