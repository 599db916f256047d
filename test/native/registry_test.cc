// registry.cc + call.cc + reactor.cc on a real libuv loop, without Node: a
// command that escapes its session and outlives its main process is found
// through the cgroup and stopped; the events come in order (exit, cleanup,
// empty); every directory is removed; and every libuv handle is closed, so
// uv_loop_close succeeds (under the sanitizer build, leaks fail the test too).
#include "loop/registry.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <uv.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "fixtures.h"
#include "kernel/procfs.h"
#include "kernel/stdio_pipes.h"

using proctree::CallEvent;
using proctree::Registry;
using proctree::SpawnedCall;
using proctree::SpawnRequest;
using proctree::SysError;

namespace {

std::string unique_token() {
  std::random_device rd;
  return "100." + std::to_string(getpid()) + std::to_string(rd() % 1000000);
}

// Live processes whose cmdline contains needle, by a /proc scan.
std::vector<pid_t> live_with(const std::string& needle) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  while (dirent* ent = readdir(proc)) {
    pid_t pid = static_cast<pid_t>(atoi(ent->d_name));
    if (pid <= 0 || pid == getpid()) continue;
    proctree::ProcessInfo info;
    if (proctree::read_process_info(pid, &info) && info.state != 'Z' &&
        info.cmdline.find(needle) != std::string::npos) {
      out.push_back(pid);
    }
  }
  closedir(proc);
  return out;
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Records events; on a call's exit, stops what it left behind, as the
// TypeScript layer does with leftovers: 'kill'.
struct Recorder : proctree::EventSink {
  Registry* registry = nullptr;
  std::vector<CallEvent> events;
  void deliver(const CallEvent& ev) override {
    events.push_back(ev);
    if (ev.kind == CallEvent::kExit) {
      if (proctree::Call* c = registry->find(ev.call_id)) c->terminate(1000, SIGTERM, "leftovers");
    }
  }
};

struct Loop {
  uv_loop_t loop;
  uv_timer_t deadline;
  bool timed_out = false;
  Loop() {
    uv_loop_init(&loop);
    uv_timer_init(&loop, &deadline);
    deadline.data = this;
    // Unreferenced: it fires only while the registry keeps the loop alive.
    uv_timer_start(
        &deadline,
        [](uv_timer_t* t) {
          static_cast<Loop*>(t->data)->timed_out = true;
          uv_stop(t->loop);
        },
        15000, 0);
    uv_unref(reinterpret_cast<uv_handle_t*>(&deadline));
  }
  int close() {
    uv_close(reinterpret_cast<uv_handle_t*>(&deadline), nullptr);
    uv_run(&loop, UV_RUN_DEFAULT);
    return uv_loop_close(&loop);
  }
};

SpawnRequest shell(const std::string& script, proctree::PreparedStdio* io) {
  proctree::StdioSpec spec[3] = {{proctree::StdioSpec::kIgnore, -1},
                                 {proctree::StdioSpec::kIgnore, -1},
                                 {proctree::StdioSpec::kIgnore, -1}};
  proctree::prepare_stdio(spec, io);
  SpawnRequest req;
  req.candidates = {"/bin/sh"};
  req.argv = {"sh", "-c", script};
  req.envp = {"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"};
  for (int i = 0; i < 3; ++i) req.stdio[i] = io->child[i].get();
  return req;
}

void close_registry(Registry* reg, Loop* loop, bool* closed) {
  reg->close_handles([](void* p) { *static_cast<bool*>(p) = true; }, closed);
  uv_run(&loop->loop, UV_RUN_DEFAULT);
}

}  // namespace

// The whole life of one call whose escaped child outlives the main process.
void escape_scenario() {
  Loop loop;
  Recorder rec;
  auto* reg = new Registry(&loop.loop, &rec);
  rec.registry = reg;
  proctree::CgroupLocation loc;
  if (SysError e = reg->location(&loc)) {
    bool closed = false;
    close_registry(reg, &loop, &closed);
    delete reg;
    loop.close();
    SKIP(std::string("no cgroup2: ") + e.syscall);
  }
  std::string tok = unique_token();
  std::string group = "proctree-unit-" + std::to_string(getpid());
  proctree::PreparedStdio io;
  // The escape killpg misses: a double fork into a new session, then the
  // main process exits 0. $(...) returns once the escaped shell has written
  // its line (after setsid) and exec'd sleep with stdout elsewhere, so the
  // escape has happened before the main process exits.
  SpawnRequest req =
      shell("x=$(setsid sh -c 'echo up; exec sleep " + tok + " >/dev/null 2>&1' &); exit 0", &io);
  SpawnedCall call;
  SysError e = reg->spawn(group, req, &call);
  for (auto& fd : io.child) fd.reset();
  if (e.err == EACCES || e.err == EROFS || e.err == EPERM) {
    bool closed = false;
    close_registry(reg, &loop, &closed);
    delete reg;
    loop.close();
    SKIP("cgroup2 is not writable here");
  }
  CHECK_EQ(e.err, 0);
  std::printf("     clone method: %s\n", proctree::clone_method_name(call.method));
  CHECK(exists(call.cgroup));

  uv_run(&loop.loop, UV_RUN_DEFAULT);
  std::vector<pid_t> survivors = live_with(tok);
  for (pid_t p : survivors) kill(p, SIGKILL);  // only what this test started
  bool cgroup_gone = !exists(call.cgroup);
  // The idle subtree lingers for a moment (its timer does not hold the loop):
  // keep the loop alive a little longer than that and it is gone.
  uv_timer_t linger;
  uv_timer_init(&loop.loop, &linger);
  uv_timer_start(&linger, [](uv_timer_t*) {}, Registry::kGroupLingerMs + 300, 0);
  uv_run(&loop.loop, UV_RUN_DEFAULT);
  uv_close(reinterpret_cast<uv_handle_t*>(&linger), nullptr);
  uv_run(&loop.loop, UV_RUN_DEFAULT);
  bool group_gone = !exists(loc.own_path + "/" + group);
  bool closed = false;
  close_registry(reg, &loop, &closed);
  delete reg;
  int loop_rc = loop.close();

  CHECK(!loop.timed_out);
  CHECK(survivors.empty());
  CHECK_EQ(rec.events.size(), size_t{3});
  CHECK_EQ(rec.events[0].kind, CallEvent::kExit);
  CHECK_EQ(rec.events[0].call_id, call.id);
  CHECK_EQ(rec.events[0].exit.code, 0);
  CHECK_EQ(rec.events[1].kind, CallEvent::kCleanup);
  const proctree::CleanupReport& report = rec.events[1].report;
  CHECK_EQ(report.reason, std::string("leftovers"));
  CHECK_EQ(report.signaled, 1);
  CHECK_EQ(report.escaped, 1);
  CHECK_EQ(report.killed, 0);
  CHECK(report.leftovers.empty());
  CHECK_EQ(rec.events[2].kind, CallEvent::kEmpty);
  CHECK(cgroup_gone);
  CHECK(group_gone);
  CHECK(closed);
  CHECK_EQ(loop_rc, 0);
}

TEST(escaped_sleeper_is_stopped_after_main_exits) { escape_scenario(); }

// As under qemu-user or a seccomp profile without clone3: the first spawn of
// a registry already finds clone3 missing, and its child must still join the
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
  Loop loop;
  Recorder rec;
  auto* reg = new Registry(&loop.loop, &rec);
  rec.registry = reg;
  proctree::CgroupLocation loc;
  if (reg->location(&loc)) {
    bool closed = false;
    close_registry(reg, &loop, &closed);
    delete reg;
    loop.close();
    SKIP("no cgroup2");
  }
  std::string tok = unique_token();
  std::string group = "proctree-unit-" + std::to_string(getpid()) + "-shutdown";
  proctree::PreparedStdio io;
  SpawnRequest req = shell("setsid sleep " + tok + " & sleep " + tok, &io);
  SpawnedCall call;
  SysError e = reg->spawn(group, req, &call);
  for (auto& fd : io.child) fd.reset();
  if (e.err == EACCES || e.err == EROFS || e.err == EPERM) {
    bool closed = false;
    close_registry(reg, &loop, &closed);
    delete reg;
    loop.close();
    SKIP("cgroup2 is not writable here");
  }
  CHECK_EQ(e.err, 0);
  // Both sleepers are running (sh itself carries the token too) before the
  // harness "exits".
  for (int i = 0; i < 500 && live_with(tok).size() < 2; ++i) usleep(10 * 1000);
  size_t started = live_with(tok).size();

  reg->shutdown_sync(2000);
  std::vector<pid_t> survivors = live_with(tok);
  for (pid_t p : survivors) kill(p, SIGKILL);
  bool cgroup_gone = !exists(call.cgroup);
  bool group_gone = !exists(loc.own_path + "/" + group);
  bool closed = false;
  close_registry(reg, &loop, &closed);
  delete reg;
  int loop_rc = loop.close();

  CHECK(started >= 2);
  CHECK(survivors.empty());
  CHECK(cgroup_gone);
  CHECK(group_gone);
  CHECK(closed);
  CHECK_EQ(loop_rc, 0);
}

CHECK_MAIN()
