// The systemd tier's side of the Environment: one broker per environment
// (started on first use through systemd-run, living in the transient scope it
// asked the user manager for), the calls it starts, and what happens when it
// is gone. The broker itself is helper/broker.cc; the socket protocol
// kernel/broker_protocol.h.
#include <atomic>
#include <memory>
#include <vector>

#include "kernel/systemd_probe.h"
#include "ladder/cgroup_confinement.h"
#include "loop/environment.h"

extern char** environ;

namespace proctree {

SysError Environment::ensure_broker(const std::string& helper) {
  if (broker_error_) return broker_error_;
  if (broker_) return SysError::none();
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  std::string systemd_run = find_in_path("systemd-run", env);
  if (systemd_run.empty()) return SysError::of(ENOENT, "broker", "systemd-run is not on PATH");
  // One broker per environment: a worker's calls die with the worker.
  static std::atomic<unsigned> environments{0};
  unsigned n = environments.fetch_add(1);
  BrokerLaunch launch;
  launch.helper = helper;
  launch.wrapper = systemd_run_wrapper(systemd_run, broker_unit_name(n == 0 ? "" : "e" + std::to_string(n + 1)));
  auto client = std::make_unique<BrokerClient>();
  if (SysError e = BrokerClient::start(launch, stack_, client.get())) return e;
  if (SysError e = reactor_.watch_broker(client->socket_fd(), client->process_pidfd())) {
    client->close();
    return e;
  }
  broker_ = std::move(client);
  return SysError::none();
}

SysError Environment::spawn_brokered(const SpawnOptions& opts, const SpawnRequest& req, SpawnedCall* out) {
  // The broker starts commands with their 0..2 only, as the user it runs as.
  if (req.fds.size() > 3) return SysError::of(ENOTSUP, "spawn", "the systemd tier passes fds 0-2 only");
  if (req.set_uid || req.set_gid) return SysError::of(ENOTSUP, "setuid", "the systemd tier runs commands as the harness's user");
  if (SysError e = ensure_broker(opts.helper)) return e;
  uint64_t id = next_call_id();
  BrokerSpawn spawn;
  spawn.leaf = "c" + std::to_string(id);
  spawn.candidates = req.candidates;
  spawn.argv = req.argv;
  if (req.inherit_env) {
    for (char** e = environ; *e; ++e) spawn.envp.push_back(*e);
  } else {
    spawn.envp = req.envp;
  }
  spawn.cwd = req.cwd;
  for (int i = 0; i < 3; ++i) {
    // The broker gives /dev/null where it gets nothing; our own fd i where
    // the call inherits it.
    if (req.fds[i] == kInherit) {
      spawn.stdio[i] = i;
    } else if (req.fds[i] == kClosed) {
      spawn.stdio[i] = -1;
    } else {
      spawn.stdio[i] = req.fds[i];
    }
  }
  spawn.controlling_tty = req.controlling_tty;
  uint64_t request = 0;
  if (SysError e = broker_->send_spawn(spawn, &request)) return e;
  if (broker_->wants_write()) reactor_.set_broker_writable(broker_->socket_fd(), true);
  brokered_[request] = id;
  out->id = id;
  out->pid = -1;  // the broker reports it: a kStarted event follows
  return adopt(new Call(this, id, Tier::kSystemd), out);
}

void Environment::on_broker_socket(bool writable) {
  if (!broker_) return;
  if (writable && broker_->flush()) {
    broker_gone(SysError::of(EPIPE, "broker", "the broker stopped reading"));
    return;
  }
  reactor_.set_broker_writable(broker_->socket_fd(), broker_->wants_write());
  for (;;) {
    BrokerEvent ev;
    if (SysError e = broker_->receive(&ev)) {
      broker_gone(e);
      return;
    }
    if (ev.kind == BrokerEvent::kNone) return;
    if (ev.kind == BrokerEvent::kClosed) {
      broker_gone(ev.error ? ev.error : SysError::of(ECONNRESET, "broker", "the broker exited"));
      return;
    }
    if (ev.kind == BrokerEvent::kReady) continue;
    auto it = brokered_.find(ev.id);
    if (it == brokered_.end()) continue;
    Call* call = find(it->second);
    switch (ev.kind) {
      case BrokerEvent::kSpawned: {
        CgroupDir leaf;
        SysError e = CgroupDir::open_existing(ev.path, &leaf);
        if (call && !e) {
          call->on_broker_spawned(ev.pid, std::move(ev.pidfd), std::move(leaf));
        } else if (call) {
          call->on_broker_lost(e);
        }
        break;
      }
      case BrokerEvent::kSpawnFailed:
        if (call) call->on_broker_failed(ev.error);
        brokered_.erase(it);
        break;
      case BrokerEvent::kExited:
        if (call) call->on_broker_exited(ev.status);
        brokered_.erase(it);
        break;
      default:
        break;
    }
  }
}

void Environment::on_broker_process() {
  if (!broker_) return;
  ExitStatus st;
  broker_->reap_process(&st);
  // What it said last is still in the socket: read it, then see it closed.
  on_broker_socket(false);
}

// The broker is gone (it could not start, or it died): its calls can no
// longer be started or hear their exit; the leaves are still ours to empty.
void Environment::broker_gone(const SysError& e) {
  broker_error_ = e;
  if (broker_) {
    reactor_.unwatch(broker_->socket_fd());
    reactor_.unwatch(broker_->process_pidfd());
    ExitStatus st;
    broker_->reap_process(&st);
    broker_->close();
  }
  std::unordered_map<uint64_t, uint64_t> calls;
  calls.swap(brokered_);
  for (const auto& kv : calls) {
    if (Call* c = find(kv.second)) c->on_broker_lost(e);
  }
}

}  // namespace proctree
