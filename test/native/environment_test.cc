// environment.cc + call.cc + reactor.cc + subtrees.cc on their own loop (the
// Waiter thread, turns run here as the binding runs them), without Node: a
// command that escapes its session and outlives its main process is found
// through the cgroup and stopped; the events come in order (exit, cleanup,
// empty); every directory is removed; and once closed the environment keeps
// nothing alive (under the sanitizer build, leaks fail the test too). The
// pgroup tier (no cgroup) runs the same way.
#include "loop/environment.h"

#include <signal.h>
#include <sys/stat.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "fixtures.h"
#include "kernel/procfs.h"
#include "kernel/stdio_fds.h"
#include "test_loop.h"

using proctree::CallEvent;
using proctree::Environment;
using proctree::SpawnedCall;
using proctree::SpawnRequest;
using proctree::SysError;

namespace {

std::string unique_token() {
  std::random_device rd;
  return "100." + std::to_string(getpid()) + std::to_string(rd() % 1000000);
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Cleanup after a failure: whatever is left in the call's cgroup (the only
// place this test's processes can be, unless the code under test let one
// out, which the test reports).
void kill_cgroup(const std::string& path) {
  proctree::CgroupDir dir;
  if (proctree::CgroupDir::open_existing(path, &dir)) return;
  fixtures::destroy_test_cgroup(&dir);
}

// Records events; on a call's exit, stops what it left behind, as the
// TypeScript layer does with leftovers: 'kill'.
struct Recorder : proctree::EventSink {
  Environment* environment = nullptr;
  std::vector<CallEvent> events;
  void deliver(const CallEvent& ev) override {
    events.push_back(ev);
    if (ev.kind == CallEvent::kExit) {
      if (proctree::Call* c = environment->find(ev.call_id)) c->terminate(1000, SIGTERM, "leftovers");
    }
  }
};

SpawnRequest shell(const std::string& script, proctree::PreparedStdio* io) {
  std::vector<proctree::StdioSpec> spec(3, proctree::StdioSpec{proctree::StdioSpec::kIgnore, -1});
  proctree::prepare_stdio(spec, proctree::PtySize{}, io);
  SpawnRequest req;
  req.candidates = {"/bin/sh"};
  req.argv = {"sh", "-c", script};
  req.envp = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"};
  req.fds = io->fds;
  return req;
}

// The cgroup tier in subtree `group`. No helper: the guardian cannot start
// (the call runs all the same, and says so in guardian_error).
proctree::SpawnOptions cgroup_tier(const std::string& group) {
  proctree::SpawnOptions o;
  o.tier = proctree::Tier::kCgroup;
  o.group = group;
  return o;
}

// One environment on its own loop, torn down on every way out of a test
// (a SKIP, a failed CHECK, the end): what the call left is killed (its
// cgroup; the token's processes in its session), the handles are closed, the
// loop is closed. A test that checks the teardown calls it itself first.
struct Harness {
  TestLoop loop;
  Recorder rec;
  Environment* env;
  std::string tok = unique_token();
  std::string cgroup;  // the call's leaf, once spawned
  std::string group;   // the call's subtree, below our own cgroup
  pid_t session = 0;   // the pgroup tier's call: its session
  bool closed = false;
  bool timed_out = false;
  int loop_rc = -1;  // 0: nothing kept the loop alive once closed

  Harness() : env(new Environment(&rec, &loop)) {
    rec.environment = env;
    loop.env = env;
  }
  // As the runtime's loop runs until nothing keeps it alive.
  void run() { timed_out = timed_out || !loop.run(); }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;
  ~Harness() { teardown(); }

  // Only what this test made: its call's cgroup (the only place the cgroup
  // tier's processes can be, unless the code under test let one out, which
  // the test reports), and in the pgroup tier the token's processes in the
  // call's session.
  void stop_leftovers() {
    if (!cgroup.empty()) kill_cgroup(cgroup);
    if (session > 0) {
      for (pid_t p : fixtures::live_mentioning(tok)) {
        if (getsid(p) == session) kill(p, SIGKILL);
      }
    }
  }

  void teardown() {
    if (!env) return;
    // A CHECK or SKIP that ended the test early may leave a call running:
    // end it the way the harness's exit does before closing the handles.
    if (check::current().failed || check::current().skipped) env->shutdown_sync(2000);
    stop_leftovers();
    env->close();
    closed = true;
    loop_rc = loop.alive ? 1 : 0;
    delete env;
    env = nullptr;
    loop.env = nullptr;
    if (!group.empty()) rmdir(group.c_str());  // after a failure; gone already otherwise
  }
};

}  // namespace

// The whole life of one call whose escaped child outlives the main process.
void escape_scenario() {
  Harness h;
  proctree::CgroupLocation loc;
  if (SysError e = h.env->location(&loc)) SKIP(std::string("no cgroup2: ") + e.syscall);
  const std::string& tok = h.tok;
  std::string group = "proctree-unit-" + std::to_string(getpid());
  proctree::PreparedStdio io;
  // The escape killpg misses: a double fork into a new session, then the
  // main process exits 0. $(...) returns once the escaped shell has written
  // its line (after setsid) and exec'd sleep with stdout elsewhere, so the
  // escape has happened before the main process exits.
  SpawnRequest req =
      shell("x=$(setsid sh -c 'echo up; exec sleep " + tok + " >/dev/null 2>&1' &); exit 0", &io);
  SpawnedCall call;
  SysError e = h.env->spawn(cgroup_tier(group), req, &call);
  for (auto& fd : io.child) fd.reset();
  h.cgroup = call.cgroup;
  h.group = loc.own_path + "/" + group;
  if (e.err == EACCES || e.err == EROFS || e.err == EPERM) SKIP("cgroup2 is not writable here");
  CHECK_EQ(e.err, 0);
  std::printf("     clone method: %s\n", proctree::clone_method_name(call.method));
  CHECK(exists(call.cgroup));
  // The leaf is c<id> in the subtree, below our own cgroup.
  CHECK_EQ(call.cgroup, loc.own_path + "/" + group + "/c" + std::to_string(call.id));
  CHECK(call.pid > 0);
  CHECK_EQ(call.guardian_error.err, ENOENT);

  h.run();
  std::vector<pid_t> survivors = fixtures::live_mentioning(tok);
  bool cgroup_gone = !exists(call.cgroup);
  // The idle subtree lingers for a moment (its timer does not hold the loop):
  // keep the loop running a little longer than that and it is gone.
  h.loop.run_for(proctree::Subtrees::kLingerMs + 300);
  bool group_gone = !exists(h.group);
  h.teardown();

  CHECK(!h.timed_out);
  CHECK(survivors.empty());
  // The exec's report first (the spawner thread saw it), then the call's life.
  CHECK(!h.rec.events.empty());
  CHECK_EQ(h.rec.events[0].kind, CallEvent::kStarted);
  CHECK_EQ(h.rec.events[0].pid, call.pid);
  const std::vector<CallEvent> events(h.rec.events.begin() + 1, h.rec.events.end());
  CHECK_EQ(events.size(), size_t{3});
  CHECK_EQ(events[0].kind, CallEvent::kExit);
  CHECK_EQ(events[0].call_id, call.id);
  CHECK_EQ(events[0].exit.code, 0);
  CHECK_EQ(events[1].kind, CallEvent::kCleanup);
  const proctree::CleanupReport& report = events[1].report;
  CHECK_EQ(report.reason, std::string("leftovers"));
  CHECK_EQ(report.signaled, 1);
  CHECK_EQ(report.escaped, 1);
  CHECK_EQ(report.killed, 0);
  CHECK(report.leftovers.empty());
  CHECK_EQ(events[2].kind, CallEvent::kEmpty);
  CHECK(cgroup_gone);
  CHECK(group_gone);
  CHECK(h.closed);
  CHECK_EQ(h.loop_rc, 0);
}

TEST(escaped_sleeper_is_stopped_after_main_exits) { escape_scenario(); }

// As under qemu-user or a seccomp profile without clone3: the first spawn of
// an environment already finds clone3 missing, and its child must still join the
// call's cgroup before the command runs, or the escape would be missed.
TEST(escaped_sleeper_is_stopped_when_clone3_is_enosys) {
  int rc = fixtures::run_forked([] {
    if (!fixtures::install_emulator_like_filter(false)) return 10;
    escape_scenario();
    if (check::current().failed) return 1;
    return check::current().skipped ? 77 : 0;
  });
  if (rc == 77) SKIP("no writable cgroup2");
  CHECK_EQ(rc, 0);
}

TEST(shutdown_kills_live_calls_and_removes_their_directories) {
  Harness h;
  proctree::CgroupLocation loc;
  if (h.env->location(&loc)) SKIP("no cgroup2");
  const std::string& tok = h.tok;
  std::string group = "proctree-unit-" + std::to_string(getpid()) + "-shutdown";
  proctree::PreparedStdio io;
  SpawnRequest req = shell("setsid sleep " + tok + " & sleep " + tok, &io);
  SpawnedCall call;
  SysError e = h.env->spawn(cgroup_tier(group), req, &call);
  for (auto& fd : io.child) fd.reset();
  h.cgroup = call.cgroup;
  h.group = loc.own_path + "/" + group;
  if (e.err == EACCES || e.err == EROFS || e.err == EPERM) SKIP("cgroup2 is not writable here");
  CHECK_EQ(e.err, 0);
  // Both sleeps are running before the harness "exits": the program sleep
  // with the token as its argument (not sh, whose script names it, nor
  // setsid before its exec).
  size_t started = fixtures::wait_live_with(tok, "sleep", 2);

  h.env->shutdown_sync(2000);
  std::vector<pid_t> survivors = fixtures::live_mentioning(tok);
  bool cgroup_gone = !exists(call.cgroup);
  bool group_gone = !exists(h.group);
  h.teardown();

  CHECK_EQ(started, size_t{2});
  CHECK(survivors.empty());
  CHECK(cgroup_gone);
  CHECK(group_gone);
  CHECK(h.closed);
  CHECK_EQ(h.loop_rc, 0);
}

// The pgroup tier (no cgroup, no helper): the command leads a new session;
// a member of that session that outlives the command gets the graceful
// signal once, and the call's events come in the same order.
TEST(pgroup_tier_stops_a_session_member_after_main_exits) {
  Harness h;
  const std::string& tok = h.tok;
  proctree::PreparedStdio io;
  // The background sleep stays in the command's session and group.
  SpawnRequest req = shell("sleep " + tok + " >/dev/null 2>&1 & exit 0", &io);
  proctree::SpawnOptions opts;
  opts.tier = proctree::Tier::kPgroup;
  SpawnedCall call;
  SysError e = h.env->spawn(opts, req, &call);
  for (auto& fd : io.child) fd.reset();
  CHECK_EQ(e.err, 0);
  CHECK(call.pid > 0);
  // The session's members are looked up by its id, the command's pid (kept
  // a zombie by the call until the session is empty). Only what is in the
  // command's session (which this test made) is killed at teardown.
  h.session = call.pid;
  CHECK(call.cgroup.empty());
  h.run();
  std::vector<pid_t> survivors = fixtures::live_mentioning(tok);
  h.teardown();

  CHECK(!h.timed_out);
  CHECK(survivors.empty());
  // The exec's report first (the spawner thread saw it), then the call's life.
  CHECK(!h.rec.events.empty());
  CHECK_EQ(h.rec.events[0].kind, CallEvent::kStarted);
  CHECK_EQ(h.rec.events[0].pid, call.pid);
  const std::vector<CallEvent> events(h.rec.events.begin() + 1, h.rec.events.end());
  CHECK_EQ(events.size(), size_t{3});
  CHECK_EQ(events[0].kind, CallEvent::kExit);
  CHECK_EQ(events[0].exit.code, 0);
  CHECK_EQ(events[1].kind, CallEvent::kCleanup);
  const proctree::CleanupReport& report = events[1].report;
  CHECK_EQ(report.reason, std::string("leftovers"));
  CHECK_EQ(report.verified, std::string("none"));
  CHECK_EQ(report.signaled, 1);
  CHECK_EQ(report.escaped, 0);
  CHECK_EQ(report.killed, 0);
  CHECK(report.leftovers.empty());
  CHECK_EQ(events[2].kind, CallEvent::kEmpty);
  CHECK(h.closed);
  CHECK_EQ(h.loop_rc, 0);
}

CHECK_MAIN()
