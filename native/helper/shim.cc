// The per-call shim of the pidns and subreaper tiers and of sealed calls:
// `proctree-helper init` runs as PID 1 of a new PID namespace, `proctree-helper
// seal` too, in a sealed call's leaf and namespaces (helper/seal.h), and
// `proctree-helper subreaper` as a PR_SET_CHILD_SUBREAPER process. Either way it starts the command in a new
// session, reaps every process of the tree (all orphans are reparented to
// it), reports the command's exit on the control socket, and exits once it
// has no child left (wait: ECHILD), which the harness sees on its pidfd as
// "the tree is empty". It is single-threaded, so fork() here is safe.
#include "helper/shim.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "helper/seal.h"
#include "helper/shim_protocol.h"
#include "kernel/exec_candidates.h"
#include "kernel/members.h"
#include "kernel/pidfd.h"
#include "kernel/proc_scan.h"

extern char** environ;

namespace proctree {
namespace {

int g_control = -1;

void send_message(int32_t kind, int32_t a, int32_t b) {
  shim::Message m{kind, a, b, 0};
  // MSG_NOSIGNAL: a harness that is gone must not kill us with SIGPIPE
  // before we have killed the tree.
  send(g_control, &m, sizeof m, MSG_NOSIGNAL);
}

// The pid of our one child as the harness's /proc numbers it: inside a new
// PID namespace fork() returns the inner pid, but `proc` (the harness's
// /proc: the path itself, or for a sealed call the mount it covered) numbers
// /proc/thread-self as the harness does.
pid_t outer_pid_of_child(int proc, pid_t inner) {
  char buf[64];
  int fd = openat(proc, proc == AT_FDCWD ? "/proc/thread-self/children" : "thread-self/children", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return inner;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return inner;
  buf[n] = '\0';
  long v = strtol(buf, nullptr, 10);
  return v > 0 ? static_cast<pid_t>(v) : inner;
}

// The harness is gone: SIGKILL everything below us until nothing is left to
// signal. Each process is re-confirmed below us after its pidfd is held: a
// descendant reaped by its own parent frees its number for anyone. Bounded;
// whatever it misses is still reaped by the loop after.
void kill_tree() {
  pid_t self = getpid();
  for (int round = 0; round < 200; ++round) {
    std::vector<pid_t> pids = live_descendants(self);
    if (pids.empty()) return;
    for_each_confirmed(
        pids,
        [self](std::vector<Held>* held) {
          std::vector<pid_t> listed = live_descendants(self);
          keep_listed(held, &listed);
          return SysError::none();
        },
        [](Held& h) { pidfd_signal(h.pidfd.get(), SIGKILL); });
    usleep(1000);
  }
}

const int kIgnored[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU};

// In the forked child: the command, in a session of its own (with the
// terminal on fd 0 as its controlling terminal when `tty`); sealed, without
// a capability left.
[[noreturn]] void exec_command(char** candidates, char** argv, bool tty, bool sealed, int report) {
  // Ignored signals stay ignored across exec: give the command defaults.
  for (int sig : kIgnored) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int32_t fail[2] = {shim::kStageSetsid, 0};
  if (setsid() < 0) {
    fail[1] = errno;
  } else if (tty && ioctl(0, TIOCSCTTY, 0) < 0) {
    fail[0] = shim::kStageCtty;
    fail[1] = errno;
  } else if (int err = sealed ? seal::drop_capabilities() : 0) {
    fail[0] = shim::kStageCapset;
    fail[1] = err;
  } else {
    std::vector<char*> sh_argv = {const_cast<char*>("/bin/sh"), nullptr};
    for (char** a = argv + 1; *a; ++a) sh_argv.push_back(*a);
    sh_argv.push_back(nullptr);
    fail[0] = shim::kStageExecve;
    fail[1] = static_cast<int32_t>(-exec_candidates(candidates, argv, environ, sh_argv.data()));
  }
  (void)!write(report, fail, sizeof fail);
  _exit(127);
}

}  // namespace

int shim_main(bool as_init, bool sealed, int argc, char** argv) {
  // argv: <control-fd> <tty:0|1> <n> <candidate>... -- <arg0> <args>...
  if (argc < 5) return 2;
  g_control = atoi(argv[0]);
  bool tty = strcmp(argv[1], "1") == 0;
  int n = atoi(argv[2]);
  if (g_control < 3 || n < 1 || n + 4 > argc || strcmp(argv[n + 3], "--") != 0) return 2;
  char** candidates = argv + 3;
  char** cmd_argv = argv + n + 4;
  candidates[n] = nullptr;  // overwrites "--": the list ends there

  // The command must not inherit the control socket.
  fcntl(g_control, F_SETFD, FD_CLOEXEC);

  if (!as_init && prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    send_message(shim::kExecFailed, errno, shim::kStageFork);
    return 1;
  }

  // The ladder's signals go to the tree, never to us: the harness signals
  // members by pidfd and ends a pidns by SIGKILL to us.
  for (int sig : kIgnored) signal(sig, SIG_IGN);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);

  // Sealed: the rest of the seal, before anything of the command exists.
  int host_proc = AT_FDCWD;
  if (sealed) {
    const char* step = "mount";
    if (int err = seal::prepare(&host_proc, &step)) {
      send_message(shim::kExecFailed, err, shim::stage_of(step));
      return 1;
    }
  }

  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    send_message(shim::kExecFailed, errno, shim::kStageFork);
    return 1;
  }
  pid_t child = fork();
  if (child < 0) {
    send_message(shim::kExecFailed, errno, shim::kStageFork);
    return 1;
  }
  if (child == 0) {
    close(report[0]);
    if (host_proc >= 0) close(host_proc);
    exec_command(candidates, cmd_argv, tty, sealed, report[1]);
  }
  close(report[1]);
  int32_t fail[2];
  ssize_t got;
  do {
    got = read(report[0], fail, sizeof fail);
  } while (got < 0 && errno == EINTR);
  close(report[0]);
  if (got == static_cast<ssize_t>(sizeof fail)) {
    waitpid(child, nullptr, 0);
    send_message(shim::kExecFailed, fail[1], fail[0]);
    return 0;
  }
  send_message(shim::kExecOk, as_init ? outer_pid_of_child(host_proc, child) : child, 0);
  if (host_proc >= 0) close(host_proc);

  bool harness_gone = false;
  for (;;) {
    // Reap everything that has exited; ECHILD: the tree is empty, we are done.
    for (;;) {
      int status = 0;
      pid_t r = waitpid(-1, &status, WNOHANG);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        // ECHILD: the tree is empty. We reaped every process of it, so our
        // children's usage is the tree's.
        rusage ru{};
        getrusage(RUSAGE_CHILDREN, &ru);
        auto ms = [](const timeval& tv) { return static_cast<int32_t>(tv.tv_sec * 1000 + tv.tv_usec / 1000); };
        send_message(shim::kUsage, ms(ru.ru_utime), ms(ru.ru_stime));
        return 0;
      }
      if (r == 0) break;
      if (r == child) {
        if (WIFEXITED(status)) {
          send_message(shim::kExit, WEXITSTATUS(status), 0);
        } else {
          send_message(shim::kExit, -1, WTERMSIG(status));
        }
      }
    }
    pollfd fds[2] = {{sfd, POLLIN, 0}, {harness_gone ? -1 : g_control, POLLIN, 0}};
    int r = poll(fds, 2, harness_gone ? 20 : -1);
    if (r < 0 && errno != EINTR) return 1;
    if (fds[0].revents) {
      signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) > 0) {
      }
    }
    if (!harness_gone && fds[1].revents) {
      char buf[64];
      ssize_t m = recv(g_control, buf, sizeof buf, MSG_DONTWAIT);
      if (m == 0 || (m < 0 && errno != EAGAIN && errno != EINTR)) {
        harness_gone = true;
        // PID 1 exiting kills the namespace, atomically: nothing to walk.
        if (as_init) return 0;
        kill_tree();
      }
    }
    if (harness_gone && !as_init) kill_tree();
  }
}

}  // namespace proctree
