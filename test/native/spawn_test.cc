// spawn.cc: the clone3 path, the errors of each step the child takes before
// exec, what the command inherits (session, signals, descriptors), and both
// fallbacks. The fallbacks run in a forked copy of the test under a seccomp
// filter that refuses clone3 with ENOSYS (as Docker's default profile and
// qemu-user do) and, for the second one, CLONE_PIDFD with EINVAL (qemu < 8.0).
#include "kernel/spawn.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <cstring>
#include <string>

#include "check.h"
#include "fixtures.h"
#include "kernel/procfs.h"
#include "kernel/stdio_pipes.h"

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
  proctree::StdioSpec spec[3] = {{proctree::StdioSpec::kIgnore, -1},
                                 {proctree::StdioSpec::kPipe, -1},
                                 {proctree::StdioSpec::kInherit, -1}};
  proctree::PreparedStdio io;
  if (proctree::prepare_stdio(spec, &io)) return "<prepare_stdio failed>";
  for (int i = 0; i < 3; ++i) req.stdio[i] = io.child[i].valid() ? io.child[i].get() : -1;
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

// In a forked copy of this process, under the filter: spawns /bin/sh that
// prints its cgroup, into a fresh test cgroup when one can be made. Exit
// codes name what went wrong.
int fallback_scenario(bool refuse_clone_pidfd, CloneMethod expected) {
  if (!fixtures::install_emulator_like_filter(refuse_clone_pidfd)) return 10;
  proctree::CgroupDir cg;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&cg, &why);
  SpawnRequest req = request({"/bin/sh", "-c", "cat /proc/self/cgroup; exit 3"});
  if (!path.empty()) {
    if (cg.open_procs_for_write()) return 11;
    req.cgroup_dir = cg.dir_fd();
    req.cgroup_procs = cg.procs_fd();
  }
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
  req.stdio[1] = 2;
  SpawnResult r;
  SysError e = proctree::spawn_process(req, stack(), &r);
  CHECK_EQ(e.err, EINVAL);
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
  bool read = e.err == 0 && proctree::read_pid_cgroup(r.pid, &own);
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

CHECK_MAIN()
