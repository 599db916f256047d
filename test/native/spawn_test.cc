// spawn.cc: the clone3 path, the errors of each step the child takes before
// exec, what the command inherits (session, signals, descriptors), and both
// fallbacks. The fallbacks run in a forked copy of the test under a seccomp
// filter that refuses clone3 with ENOSYS (as Docker's default profile and
// qemu-user do) and, for the second one, CLONE_PIDFD with EINVAL (qemu < 8.0).
#include "kernel/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include <cstring>
#include <string>

#include "check.h"
#include "fixtures.h"
#include "kernel/procfs.h"
#include "kernel/pty.h"
#include "kernel/stdio_fds.h"

using proctree::ChildStack;
using proctree::CloneMethod;
using proctree::SpawnRequest;
using proctree::SpawnResult;
using proctree::SysError;

namespace {

ChildStack& stack() {
  static ChildStack s;
  return s;
}

SpawnRequest request(std::vector<std::string> argv) {
  SpawnRequest req;
  req.candidates = {argv[0]};
  req.argv = std::move(argv);
  req.envp = {"PATH=/usr/bin:/bin"};
  return req;
}

// Runs argv with stdout on a pipe; returns what it printed and its exit status.
std::string output_of(SpawnRequest req, proctree::ExitStatus* st, CloneMethod* method = nullptr) {
  std::vector<proctree::StdioSpec> spec = {{proctree::StdioSpec::kIgnore, -1},
                                           {proctree::StdioSpec::kPipe, -1},
                                           {proctree::StdioSpec::kInherit, -1}};
  proctree::PreparedStdio io;
  if (proctree::prepare_stdio(spec, proctree::PtySize{}, &io)) return "<prepare_stdio failed>";
  req.fds = io.fds;
  SpawnResult r;
  if (SysError e = proctree::spawn_process(req, stack(), &r)) {
    return std::string("<") + e.syscall + " failed: " + strerror(e.err) + ">";
  }
  if (method) *method = r.method;
  for (auto& fd : io.child) fd.reset();
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(io.parent[1].get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  *st = fixtures::wait_exit(r.pidfd.get());
  return out;
}

// A started command and the harness's ends of its stdio.
struct Started {
  SysError error;
  SpawnResult result;
  proctree::PreparedStdio io;
};

// Prepares spec, starts req with it, and closes our copies of the child's ends.
Started start(SpawnRequest req, const std::vector<proctree::StdioSpec>& spec, proctree::PtySize pty = {}) {
  Started s;
  if ((s.error = proctree::prepare_stdio(spec, pty, &s.io))) return s;
  req.fds = s.io.fds;
  req.controlling_tty = s.io.controlling_tty;
  s.error = proctree::spawn_process(req, stack(), &s.result);
  s.io.child.clear();
  return s;
}

// Everything until EOF (blocking descriptors).
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// From a non-blocking descriptor (a pty master) until `until` has been seen,
// EOF/EIO (the slave side closed), or timeout_ms.
std::string read_until(int fd, const std::string& until, std::string* acc, int timeout_ms = 10000) {
  char buf[4096];
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (acc->find(until) != std::string::npos) return *acc;
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, 10);
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) acc->append(buf, static_cast<size_t>(n));
    if (n == 0 || (n < 0 && errno == EIO)) break;
  }
  return *acc;
}

using Kind = proctree::StdioSpec::Kind;
std::vector<proctree::StdioSpec> kinds(std::initializer_list<Kind> ks) {
  std::vector<proctree::StdioSpec> out;
  for (Kind k : ks) out.push_back(proctree::StdioSpec{k, -1});
  return out;
}

// A descriptor of ours without close-on-exec (at a low number and at 200)
// must not reach the command.
int leak_check() {
  int low = open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  if (low < 3) return 20;
  if (dup2(low, 200) != 200) return 21;
  std::string script = "for fd in " + std::to_string(low) +
                       " 200; do test -e /proc/self/fd/$fd && echo leaked $fd; done; echo checked";
  proctree::ExitStatus st;
  std::string out = output_of(request({"/bin/sh", "-c", script}), &st);
  close(low);
  close(200);
  if (out != "checked\n") {
    std::printf("     command saw: %s\n", out.c_str());
    return 22;
  }
  return 0;
}

// tty_nr of /proc/<pid>/stat (field 7), or -1.
long stat_tty_nr(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = fopen(path.c_str(), "re");
  if (!f) return -1;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char* close_paren = strrchr(buf, ')');
  if (!close_paren) return -1;
  char state;
  int ppid, pgrp, session;
  long tty_nr;
  if (sscanf(close_paren + 1, " %c %d %d %d %ld", &state, &ppid, &pgrp, &session, &tty_nr) != 5) return -1;
  return tty_nr;
}

// In a forked copy of this process, under the filter: spawns /bin/sh that
// prints its cgroup, into a fresh test cgroup when one can be made. Exit
// codes name what went wrong.
int fallback_scenario(bool refuse_clone_pidfd, CloneMethod expected) {
  if (!fixtures::install_emulator_like_filter(refuse_clone_pidfd)) return 10;
  proctree::CgroupDir cg;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&cg, &why);
  SpawnRequest req = request({"/bin/sh", "-c", "cat /proc/self/cgroup; exit 3"});
  if (!path.empty()) req.cgroup_dir = cg.dir_fd();
  proctree::ExitStatus st;
  CloneMethod method = CloneMethod::kClone3;
  std::string out = output_of(req, &st, &method);
  int rc = 0;
  if (method != expected) rc = 12;
  else if (proctree::clone3_available()) rc = 13;
  else if (!st.done || st.code != 3) rc = 14;
  else if (!path.empty()) {
    // The child joined the cgroup itself, before exec: what it printed is
    // the call's cgroup, not ours.
    std::string leaf = path.substr(path.rfind('/'));
    if (out.find(leaf + "\n") == std::string::npos) rc = 15;
  }
  fixtures::destroy_test_cgroup(&cg);
  return rc;
}

}  // namespace

TEST(true_runs_without_a_cgroup) {
  SpawnRequest req = request({"/bin/true"});
  SpawnResult r;
  SysError e = proctree::spawn_process(req, stack(), &r);
  CHECK_EQ(e.err, 0);
  CHECK(r.pid > 0);
  CHECK(r.pidfd.valid());
  std::printf("     clone method: %s\n", proctree::clone_method_name(r.method));
  proctree::ExitStatus st = fixtures::wait_exit(r.pidfd.get());
  CHECK(st.done);
  CHECK_EQ(st.code, 0);
  CHECK_EQ(st.signal, 0);
}

TEST(exit_code_arguments_and_environment_arrive) {
  SpawnRequest req = request({"/bin/sh", "-c", "printf '%s|%s' \"$0\" \"$PROCTREE_UNIT\"; exit 7", "zero"});
  req.envp.push_back("PROCTREE_UNIT=value with spaces");
  proctree::ExitStatus st;
  std::string out = output_of(req, &st);
  CHECK_EQ(out, std::string("zero|value with spaces"));
  CHECK(st.done);
  CHECK_EQ(st.code, 7);
}

TEST(first_existing_candidate_runs) {
  SpawnRequest req = request({"true"});
  req.candidates = {"/nonexistent/true", "/nonexistent-dir/x/true", "/bin/true"};
  SpawnResult r;
  CHECK_EQ(proctree::spawn_process(req, stack(), &r).err, 0);
  CHECK_EQ(fixtures::wait_exit(r.pidfd.get()).code, 0);
}

TEST(missing_command_is_enoent_from_execve) {
  SpawnRequest req = request({"nope"});
  req.candidates = {"/nonexistent/nope", "/also/not/here"};
  SpawnResult r;
  SysError e = proctree::spawn_process(req, stack(), &r);
  CHECK_EQ(e.err, ENOENT);
  CHECK_EQ(std::string(e.syscall), std::string("execve"));
  CHECK(!r.pidfd.valid());
}

TEST(not_executable_is_eacces_but_later_candidates_still_run) {
  char path[] = "/tmp/proctree-unit-noexec-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  chmod(path, 0644);
  SpawnRequest req = request({"x"});
  req.candidates = {path};
  SpawnResult r;
  SysError e = proctree::spawn_process(req, stack(), &r);
  req.candidates = {path, "/bin/true"};
  SpawnResult r2;
  SysError e2 = proctree::spawn_process(req, stack(), &r2);
  unlink(path);
  CHECK_EQ(e.err, EACCES);
  CHECK_EQ(std::string(e.syscall), std::string("execve"));
  CHECK_EQ(e2.err, 0);
  CHECK_EQ(fixtures::wait_exit(r2.pidfd.get()).code, 0);
}

TEST(missing_cwd_is_enoent_from_chdir_with_path) {
  SpawnRequest req = request({"/bin/true"});
  req.cwd = "/nonexistent/proctree-unit-cwd";
  SpawnResult r;
  SysError e = proctree::spawn_process(req, stack(), &r);
  CHECK_EQ(e.err, ENOENT);
  CHECK_EQ(std::string(e.syscall), std::string("chdir"));
  CHECK_EQ(e.path, req.cwd);
}

TEST(cwd_is_applied) {
  SpawnRequest req = request({"/bin/sh", "-c", "pwd"});
  req.cwd = "/proc";
  proctree::ExitStatus st;
  CHECK_EQ(output_of(req, &st), std::string("/proc\n"));
}

TEST(stdio_below_3_is_refused) {
  SpawnRequest req = request({"/bin/true"});
  req.fds[1] = 2;
  SpawnResult r;
  SysError e = proctree::spawn_process(req, stack(), &r);
  CHECK_EQ(e.err, EINVAL);
}

TEST(source_below_the_fd_count_is_refused) {
  // With five fds, a source of 4 would be clobbered by the dup onto fd 4.
  SpawnRequest req = request({"/bin/true"});
  int null = proctree::dev_null_fd();
  req.fds = {proctree::kInherit, proctree::kInherit, proctree::kInherit, proctree::kInherit, 4};
  SpawnResult r;
  SysError e = proctree::spawn_process(req, stack(), &r);
  CHECK_EQ(e.err, EINVAL);
  CHECK(!r.pidfd.valid());
  // Fewer than three entries: refused too.
  req.fds = {null, null};
  CHECK_EQ(proctree::spawn_process(req, stack(), &r).err, EINVAL);
}

TEST(command_leads_its_own_session_and_ignored_signals_are_reset) {
  // An ignored SIGTERM in the harness must not make the command immune.
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGTERM, &ign, &old);
  SpawnRequest req = request({"/bin/sleep", "30"});
  SpawnResult r;
  SysError e = proctree::spawn_process(req, stack(), &r);
  sigaction(SIGTERM, &old, nullptr);
  CHECK_EQ(e.err, 0);
  proctree::ProcessInfo info;
  bool read = proctree::read_process_stat(r.pid, &info);
  proctree::pidfd_signal(r.pidfd.get(), SIGTERM);
  proctree::ExitStatus st = fixtures::wait_exit(r.pidfd.get());
  CHECK(read);
  CHECK_EQ(info.comm, std::string("sleep"));
  CHECK_EQ(info.sid, r.pid);
  CHECK_EQ(info.pgid, r.pid);
  CHECK(st.done);
  CHECK_EQ(st.signal, SIGTERM);
}

TEST(harness_descriptors_do_not_leak_into_the_command) {
  int leaked = open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  CHECK(leaked >= 3);
  std::string script = "test -e /proc/self/fd/" + std::to_string(leaked) + " && echo leaked || echo clean";
  SpawnRequest req = request({"/bin/sh", "-c", script});
  proctree::ExitStatus st;
  std::string out = output_of(req, &st);
  close(leaked);
  CHECK_EQ(out, std::string("clean\n"));
}

TEST(signal_to_reaped_pidfd_is_esrch) {
  SpawnRequest req = request({"/bin/true"});
  SpawnResult r;
  CHECK_EQ(proctree::spawn_process(req, stack(), &r).err, 0);
  CHECK(fixtures::wait_exit(r.pidfd.get()).done);
  CHECK_EQ(proctree::pidfd_signal(r.pidfd.get(), SIGKILL), ESRCH);
}

TEST(clone3_places_the_child_in_the_cgroup) {
  if (!proctree::clone3_available()) SKIP("clone3 is not available here");
  proctree::CgroupDir cg;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&cg, &why);
  if (path.empty()) SKIP(why);
  SpawnRequest req = request({"/bin/sleep", "30"});
  req.cgroup_dir = cg.dir_fd();
  SpawnResult r;
  SysError e = proctree::spawn_process(req, stack(), &r);
  std::string own;
  bool read = e.err == 0 && fixtures::pid_cgroup(r.pid, &own);
  std::vector<pid_t> members;
  cg.read_procs(&members);
  fixtures::destroy_test_cgroup(&cg);
  CHECK_EQ(e.err, 0);
  CHECK(r.method == CloneMethod::kClone3);
  proctree::ExitStatus st = fixtures::wait_exit(r.pidfd.get());
  CHECK(read);
  CHECK(path.size() >= own.size() && path.compare(path.size() - own.size(), own.size(), own) == 0);
  CHECK_EQ(members.size(), size_t{1});
  CHECK_EQ(members[0], r.pid);
  CHECK_EQ(st.signal, SIGKILL);
}

TEST(clone_fallback_when_clone3_is_enosys) {
  CHECK_EQ(fixtures::run_forked([] { return fallback_scenario(false, CloneMethod::kClone); }), 0);
}

TEST(clone_then_pidfd_open_when_clone_pidfd_is_refused) {
  CHECK_EQ(fixtures::run_forked([] { return fallback_scenario(true, CloneMethod::kClonePidfdOpen); }), 0);
}

// execvp's rule: a file without "#!" that the kernel refuses with ENOEXEC
// runs through /bin/sh, with the file as $0 and the same arguments.
TEST(script_without_shebang_runs_through_bin_sh) {
  char path[] = "/tmp/proctree-unit-script-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  const std::string body = "echo \"via sh: $0|$1|$2\"\nexit 5\n";
  bool wrote = write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
  close(fd);
  chmod(path, 0755);
  SpawnRequest req = request({"myscript", "a b", "c"});
  req.candidates = {"/nonexistent/myscript", path};
  proctree::ExitStatus st;
  std::string out = output_of(req, &st);
  unlink(path);
  CHECK(wrote);
  CHECK_EQ(out, "via sh: " + std::string(path) + "|a b|c\n");
  CHECK(st.done);
  CHECK_EQ(st.code, 5);
}

// Polls /proc/<pid>/syscall (up to timeout_ms) until the process is
// blocked in read(0, ...): "<nr> 0x0 ..." while it sleeps in a system call,
// "running" otherwise.
static bool waits_in_read_of_fd0(pid_t pid, int timeout_ms) {
  const std::string want = std::to_string(__NR_read) + " 0x0 ";
  const std::string path = "/proc/" + std::to_string(pid) + "/syscall";
  for (int waited = 0; waited <= timeout_ms; waited += 5) {
    proctree::Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    char buf[256];
    ssize_t n = fd ? read(fd.get(), buf, sizeof buf - 1) : -1;
    if (n > 0 && std::string(buf, static_cast<size_t>(n)).compare(0, want.size(), want) == 0) return true;
    usleep(5 * 1000);
  }
  return false;
}

// Node makes some descriptors non-blocking; a command handed one would fail
// its reads with EAGAIN. The child puts 0..2 in blocking mode, as libuv does.
TEST(stdin_is_blocking_in_the_command_though_ours_was_not) {
  int in[2];
  CHECK(pipe2(in, O_CLOEXEC | O_NONBLOCK) == 0);
  std::vector<proctree::StdioSpec> spec = {
      {proctree::StdioSpec::kFd, in[0]}, {proctree::StdioSpec::kPipe, -1}, {proctree::StdioSpec::kInherit, -1}};
  Started s = start(request({"/bin/sh", "-c", "grep '^flags' /proc/$$/fdinfo/0; read x; echo got:$x"}), spec);
  close(in[0]);
  CHECK_EQ(s.error.err, 0);
  // Written only once the shell waits in read on fd 0 (the kernel's account,
  // /proc/<pid>/syscall): non-blocking, it would have got EAGAIN and printed
  // "got:" already.
  bool waiting = waits_in_read_of_fd0(s.result.pid, 10000);
  bool wrote = write(in[1], "hello\n", 6) == 6;
  close(in[1]);
  std::string out = read_all(s.io.parent[1].get());
  proctree::ExitStatus st = fixtures::wait_exit(s.result.pidfd.get());
  CHECK(waiting);
  CHECK(wrote);
  CHECK_EQ(st.code, 0);
  unsigned long flags = 0;
  CHECK(sscanf(out.c_str(), "flags:\t%lo", &flags) == 1);
  CHECK_EQ(flags & O_NONBLOCK, 0ul);
  CHECK(out.find("\ngot:hello\n") != std::string::npos);
}

TEST(inherited_stdin_is_blocking_in_the_command_though_ours_was_not) {
  int rc = fixtures::run_forked([]() -> int {
    int in[2];
    if (pipe2(in, O_NONBLOCK) != 0) return 2;
    if (dup2(in[0], 0) != 0) return 3;
    close(in[0]);
    close(in[1]);
    proctree::ExitStatus st;
    std::string out = output_of(request({"/bin/sh", "-c", "grep '^flags' /proc/$$/fdinfo/0"}), &st);
    unsigned long flags = 0;
    if (sscanf(out.c_str(), "flags:\t%lo", &flags) != 1) return 4;
    return (flags & O_NONBLOCK) ? 5 : 0;
  });
  CHECK_EQ(rc, 0);
}

TEST(fds_beyond_stdio_are_what_was_asked) {
  Started s = start(request({"/bin/sh", "-c", "echo three >&3; echo four >&4; echo one"}),
                    kinds({Kind::kIgnore, Kind::kPipe, Kind::kInherit, Kind::kPipe, Kind::kPipe}));
  CHECK_EQ(s.error.err, 0);
  std::string one = read_all(s.io.parent[1].get());
  std::string three = read_all(s.io.parent[3].get());
  std::string four = read_all(s.io.parent[4].get());
  proctree::ExitStatus st = fixtures::wait_exit(s.result.pidfd.get());
  CHECK_EQ(st.code, 0);
  CHECK_EQ(one, std::string("one\n"));
  CHECK_EQ(three, std::string("three\n"));
  CHECK_EQ(four, std::string("four\n"));
}

// kInherit below the fd count keeps the harness's own fd; kClosed closes it
// in the child though the harness has one open (without close-on-exec).
TEST(inherit_and_closed_beyond_stdio) {
  int rc = fixtures::run_forked([]() -> int {
    char five[] = "/tmp/proctree-unit-fd5-XXXXXX";
    char six[] = "/tmp/proctree-unit-fd6-XXXXXX";
    int a = mkstemp(five), b = mkstemp(six);
    if (a < 0 || b < 0) return 2;
    unlink(five);
    unlink(six);
    // The harness's own 5 and 6, without close-on-exec.
    if (dup2(a, 5) != 5 || dup2(b, 6) != 6) return 3;
    std::vector<proctree::StdioSpec> spec = kinds(
        {Kind::kInherit, Kind::kPipe, Kind::kInherit, Kind::kClose, Kind::kClose, Kind::kInherit, Kind::kClose});
    Started s = start(
        request({"/bin/sh", "-c",
                 "readlink /proc/self/fd/5; for fd in 3 4 6; do test -e /proc/self/fd/$fd && echo open $fd; done; "
                 "echo end"}),
        spec);
    if (s.error) return 4;
    std::string out = read_all(s.io.parent[1].get());
    fixtures::wait_exit(s.result.pidfd.get());
    std::string want = std::string(five) + " (deleted)\nend\n";
    if (out != want) {
      std::printf("     command saw: %s", out.c_str());
      return 5;
    }
    return 0;
  });
  CHECK_EQ(rc, 0);
}

// Without close_range(CLOSE_RANGE_CLOEXEC) (Linux < 5.11, or a seccomp
// profile that does not know it), the parent lists its descriptors and the
// child marks each close-on-exec. close_range_cloexec_works() is asked once
// per process: each case runs in a fresh one.
SCENARIO(no_close_range_by_env) {
  if (proctree::close_range_cloexec_works()) return 2;
  return leak_check();
}

SCENARIO(close_range_is_enosys) {
  if (!fixtures::install_errno_filter({__NR_close_range}, ENOSYS)) return 10;
  if (proctree::close_range_cloexec_works()) return 2;
  return leak_check();
}

TEST(no_leak_without_close_range_by_env) {
  CHECK_EQ(fixtures::run_scenario("no_close_range_by_env", {{"PROCTREE_TEST_NO_CLOSE_RANGE", "1"}}), 0);
}

TEST(no_leak_when_close_range_is_enosys) { CHECK_EQ(fixtures::run_scenario("close_range_is_enosys"), 0); }

TEST(close_range_is_used_where_it_works) {
  // This kernel has it (5.11+): the fallback is not what the other tests ran.
  if (syscall(__NR_close_range, ~0U - 1, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */) != 0) SKIP("no close_range here");
  CHECK(proctree::close_range_cloexec_works());
}

// A pseudo-terminal for 0..2: the command leads a new session whose
// controlling terminal it is, and a resize reaches it.
TEST(pty_is_the_commands_controlling_terminal) {
  proctree::PtySize size;
  size.cols = 80;
  size.rows = 24;
  Started s = start(request({"/bin/sh", "-c", "tty; stty size; echo ready; read x; stty size; echo done"}),
                    kinds({Kind::kPty, Kind::kPty, Kind::kPty}), size);
  CHECK_EQ(s.error.err, 0);
  int master = s.io.pty_master.get();
  char name[128] = {};
  CHECK_EQ(ptsname_r(master, name, sizeof name), 0);
  std::string out;
  read_until(master, "ready", &out);
  // The session is the command's, and the terminal's foreground group too.
  proctree::ProcessInfo info;
  bool read = proctree::read_process_stat(s.result.pid, &info);
  long tty_nr = stat_tty_nr(s.result.pid);
  pid_t fg = proctree::pty_foreground(master);
  struct stat st {};
  bool stated = stat(name, &st) == 0;
  SysError rz = proctree::resize_pty(master, 100, 40);
  bool wrote = write(master, "go\n", 3) == 3;
  read_until(master, "done", &out);
  proctree::ExitStatus ex = fixtures::wait_exit(s.result.pidfd.get());

  CHECK(out.find(std::string(name) + "\r\n") == 0);
  CHECK(out.find("24 80\r\n") != std::string::npos);
  CHECK(out.find("40 100\r\n") != std::string::npos);
  CHECK(out.find("40 100") > out.find("24 80"));
  CHECK(read);
  CHECK_EQ(info.sid, s.result.pid);
  CHECK(stated);
  // The kernel's encoding of a device number in tty_nr.
  unsigned maj = major(st.st_rdev), min = minor(st.st_rdev);
  long want = static_cast<long>((min & 0xff) | (maj << 8) | ((min & ~0xffu) << 12));
  CHECK_EQ(tty_nr, want);
  CHECK_EQ(fg, s.result.pid);
  CHECK_EQ(rz.err, 0);
  CHECK(wrote);
  CHECK(ex.done);
  CHECK_EQ(ex.code, 0);
}

// The child reports a failure before exec in our memory (a real vfork), not
// through a pipe: a pipe's write end can be held by any process forked
// meanwhile (another thread's fork, before it execs), and the read for EOF
// would block on it. Proof: once the first spawn has shown a real vfork, a
// filter makes every pipe and socketpair fail, and spawning still works,
// failures included.
SCENARIO(no_pipe_after_the_first_spawn) {
  SpawnResult first;
  if (proctree::spawn_process(request({"/bin/true"}), stack(), &first)) return 2;
  fixtures::wait_exit(first.pidfd.get());
  std::vector<int> nrs = {__NR_pipe2, __NR_socketpair};
#ifdef __NR_pipe
  nrs.push_back(__NR_pipe);
#endif
  if (!fixtures::install_errno_filter(nrs, EPERM)) return 10;
  int p[2];
  if (pipe2(p, O_CLOEXEC) == 0 || errno != EPERM) return 3;  // the filter works
  SpawnResult r;
  if (SysError e = proctree::spawn_process(request({"/bin/sh", "-c", "exit 4"}), stack(), &r)) {
    std::printf("     spawn: %s errno %d\n", e.syscall, e.err);
    return 4;
  }
  if (fixtures::wait_exit(r.pidfd.get()).code != 4) return 5;
  SpawnRequest missing = request({"nope"});
  missing.candidates = {"/nonexistent/nope"};
  SysError e = proctree::spawn_process(missing, stack(), &r);
  if (e.err != ENOENT || std::string(e.syscall) != "execve") return 6;
  SpawnRequest bad_cwd = request({"/bin/true"});
  bad_cwd.cwd = "/nonexistent/proctree-unit-cwd";
  e = proctree::spawn_process(bad_cwd, stack(), &r);
  if (e.err != ENOENT || std::string(e.syscall) != "chdir") return 7;
  return 0;
}

TEST(spawn_opens_no_pipe_after_the_first) { CHECK_EQ(fixtures::run_scenario("no_pipe_after_the_first_spawn"), 0); }

CHECK_MAIN()
