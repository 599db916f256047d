// The broker under a real systemd, before the tier is wired into the addon:
// test/systemd.test.ts runs this inside the fixture's SSH-like session (as
// the unprivileged user, in a root-owned session-N.scope). It probes the
// user manager, starts the broker through systemd-run exactly as the tier
// will, and does from the harness side what the cgroup tier's ladder does
// (freeze, read cgroup.procs, cgroup.kill, rmdir), printing one JSON line of
// what the kernel said. Not a ctest test: it needs the session.
//   broker_systemd_check <helper> <token> exit     one call, stopped, then a clean close
//   broker_systemd_check <helper> <token> sigkill  two escaping calls, then SIGKILL itself
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fixtures.h"
#include "kernel/broker_client.h"
#include "kernel/cgroup.h"
#include "kernel/systemd_probe.h"

extern char** environ;

namespace {

using proctree::BrokerClient;
using proctree::BrokerEvent;

std::string json(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

BrokerEvent next_event(BrokerClient& c, int timeout_ms = 10000) {
  BrokerEvent ev;
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    if (c.receive(&ev) || ev.kind != BrokerEvent::kNone) return ev;
    pollfd p{c.socket_fd(), POLLIN, 0};
    poll(&p, 1, 10);
  }
  return ev;
}

size_t members(const std::string& leaf) {
  proctree::CgroupDir d;
  std::vector<pid_t> pids;
  if (!proctree::CgroupDir::create(leaf, true, &d)) d.read_procs(&pids);
  return pids.size();
}

// The leaf's members once the script has settled: three `sleep`s and nothing
// else. A count alone is not enough: sh, the subshell and the nohup child
// make three too, before the subshell's child exists.
bool settled(const std::string& leaf) {
  proctree::CgroupDir d;
  std::vector<pid_t> pids;
  if (proctree::CgroupDir::create(leaf, true, &d) || d.read_procs(&pids) || pids.size() != 3) return false;
  for (pid_t p : pids) {
    char comm[32] = {};
    int fd = open(("/proc/" + std::to_string(p) + "/comm").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, comm, sizeof comm - 1);
    close(fd);
    if (n <= 0 || strcmp(comm, "sleep\n") != 0) return false;
  }
  return true;
}

// The cgroup2 path of a process, relative to the hierarchy (empty when it is gone).
std::string cgroup_of(pid_t pid) {
  std::string rel;
  return fixtures::pid_cgroup(pid, &rel) ? rel : std::string();
}

void print(const std::string& s) {
  fputs(s.c_str(), stdout);
  fputc('\n', stdout);
  fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s <helper> <token> exit|sigkill\n", argv[0]);
    return 2;
  }
  const std::string helper = argv[1], tok = argv[2], mode = argv[3];
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);

  std::string out = "{";
  proctree::UserManagerProbe probe = proctree::probe_user_manager(env);
  out += "\"probe\":{\"ok\":" + std::string(probe.ok ? "true" : "false") + ",\"errno\":" + std::to_string(probe.err) +
         ",\"detail\":" + json(probe.detail) + "}";
  if (!probe.ok) {
    print(out + "}");
    return 0;
  }
  proctree::ChildStack stack;
  proctree::BrokerLaunch launch;
  launch.helper = helper;
  std::string unit = proctree::broker_unit_name();
  launch.wrapper = proctree::systemd_run_wrapper(probe.systemd_run, unit);
  BrokerClient c;
  timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (proctree::SysError e = BrokerClient::start(launch, stack, &c)) {
    print(out + ",\"start\":" + json(std::string(e.syscall) + " " + strerror(e.err)) + "}");
    return 1;
  }
  BrokerEvent ready;
  c.wait_ready(20000, &ready);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  // systemd-run's D-Bus round trip and the scope's job, once per harness.
  long ready_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
  out += ",\"unit\":" + json(unit) + ",\"harness\":" + std::to_string(getpid()) + ",\"readyUs\":" + std::to_string(ready_us);
  if (ready.kind != BrokerEvent::kReady) {
    print(out + ",\"ready\":false,\"error\":" + json(std::string(ready.error.syscall) + " " + strerror(ready.error.err) + ": " + ready.error.path) + "}");
    return 1;
  }
  out += ",\"ready\":true,\"brokerPid\":" + std::to_string(ready.pid) + ",\"scope\":" + json(ready.path) +
         ",\"cgroupKill\":" + (ready.cgroup_kill ? "true" : "false") + ",\"brokerLeafMembers\":" +
         std::to_string(members(ready.path + "/broker"));

  std::string script = "(setsid sleep " + tok + " &); nohup sleep " + tok + " >/dev/null 2>&1 & exec sleep " + tok;
  int calls = mode == "sigkill" ? 2 : 1;
  out += ",\"calls\":[";
  std::vector<std::string> leaves;
  for (int i = 0; i < calls; ++i) {
    proctree::BrokerSpawn s;
    s.candidates = {"/bin/sh"};
    s.argv = {"sh", "-c", script};
    s.envp = {"PATH=/usr/bin:/bin"};
    uint64_t id;
    c.send_spawn(s, &id);
    BrokerEvent ev = next_event(c);
    if (ev.kind != BrokerEvent::kSpawned) {
      print(out + "],\"spawn\":" + json(std::string(ev.error.syscall) + " " + strerror(ev.error.err)) + "}");
      return 1;
    }
    // All three sleepers, by the kernel's account of the leaf.
    for (int w = 0; w < 500 && !settled(ev.path); ++w) usleep(10 * 1000);
    std::string cg = cgroup_of(ev.pid);
    out += std::string(i ? "," : "") + "{\"leaf\":" + json(ev.path) + ",\"pid\":" + std::to_string(ev.pid) +
           ",\"pidCgroup\":" + json(cg) + ",\"members\":" + std::to_string(members(ev.path));
    leaves.push_back(ev.path);
    if (mode == "exit") {
      // The harness's own ladder, on a cgroup it could not have made itself
      // a process in: freeze, read, kill, wait, remove.
      proctree::CgroupDir leaf;
      proctree::CgroupDir::create(ev.path, true, &leaf);
      proctree::SysError fr = leaf.write_file("cgroup.freeze", "1");
      // As the ladder does: the members are read once the kernel says frozen.
      for (int w = 0; w < 500; ++w) {
        proctree::CgroupEvents e;
        if (leaf.read_events(&e) || e.frozen) break;
        usleep(10 * 1000);
      }
      std::vector<pid_t> pids;
      leaf.read_procs(&pids);
      leaf.write_file("cgroup.freeze", "0");
      proctree::SysError k = leaf.write_file("cgroup.kill", "1");
      BrokerEvent exit = next_event(c);
      for (int w = 0; w < 500; ++w) {
        proctree::CgroupEvents e;
        if (leaf.read_events(&e) || !e.populated) break;
        usleep(10 * 1000);
      }
      proctree::SysError rm = leaf.remove();
      out += ",\"freeze\":" + std::to_string(fr.err) + ",\"frozenMembers\":" + std::to_string(pids.size()) +
             ",\"kill\":" + std::to_string(k.err) + ",\"exitKind\":" + std::to_string(exit.kind) +
             ",\"exitSignal\":" + std::to_string(exit.status.signal) + ",\"rmdir\":" + std::to_string(rm.err);
    }
    out += "}";
  }
  out += "]";
  if (mode == "sigkill") {
    print(out + "}");
    raise(SIGKILL);
  }
  c.close();
  proctree::ExitStatus st;
  for (int w = 0; w < 500 && !st.done; ++w) {
    c.reap_process(&st);
    if (!st.done) usleep(10 * 1000);
  }
  print(out + ",\"brokerExit\":" + std::to_string(st.code) + "}");
  return 0;
}
