// The harness side of the systemd tier's broker (helper/broker.h), plain
// C++ for the event loop to drive: start() returns at once, the loop polls
// socket_fd() (readable: call receive() until it says kNone; writable while
// wants_write(): call flush()) and process_pidfd() (readable: the broker
// exited; reap_process()). Nothing here blocks except wait_ready(), which is
// for probes and tests. Protocol: kernel/broker_protocol.h.
//
// The broker is started as
//   systemd-run --user --scope -p Delegate=yes --unit=<unit> --quiet --collect
//     -- proctree-helper broker <harness-pid> <harness-start-time>
// with its end of a socketpair at fd 3. systemd-run rather than the D-Bus
// StartTransientUnit call: it needs no D-Bus client in the addon (sd-bus
// would add libsystemd as a dependency, a hand-written one ~1000 lines of
// marshalling), it waits for the scope's job and moves itself into the
// scope before it execs the broker (StartTransientUnit with PIDs= would need
// the same job tracking by hand), it finds the manager the way systemctl
// does (the private socket, else the user bus), and it keeps fd 3 open
// across its exec, so the socket is a socketpair: nothing in the file
// system, no one else can connect, no path to clean up. It costs one
// fork + exec + D-Bus round trip (tens of ms) once per harness, off the loop.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "kernel/broker_protocol.h"
#include "kernel/fd.h"
#include "kernel/pidfd.h"
#include "kernel/spawn.h"
#include "kernel/sys_error.h"

namespace proctree {

struct BrokerLaunch {
  std::string helper;                // the proctree-helper executable
  // Run before the helper, e.g. systemd_run_wrapper(); empty: the helper is
  // started directly (tests without systemd, with cgroup_dir).
  std::vector<std::string> wrapper;
  std::vector<std::string> envp;     // empty: this process's environment
  // Where the process starts (CLONE_INTO_CGROUP); -1: our own cgroup, which
  // is what systemd-run needs (it moves itself into the scope it asks for).
  int cgroup_dir = -1;
};

// `<systemd_run> --user --scope -p Delegate=yes --unit=<unit> --quiet --collect --`
std::vector<std::string> systemd_run_wrapper(const std::string& systemd_run, const std::string& unit);

// A transient unit name of this harness process: "<subtree_prefix()>.scope",
// or "<subtree_prefix()>-<suffix>.scope" for a second broker (one per
// environment, say); unique across harnesses (kernel/guardian_launch.h).
std::string broker_unit_name(const std::string& suffix = {});

struct BrokerSpawn {
  std::string leaf;  // relative to the scope; empty: the broker names it call-<n>
  std::vector<std::string> candidates;
  std::vector<std::string> argv;
  std::vector<std::string> envp;
  std::string cwd;   // empty: this process's working directory at send time
  // Descriptors for the call's 0/1/2, duplicated at send_spawn(): the caller
  // may close its own right after. -1: /dev/null.
  int stdio[3] = {-1, -1, -1};
  bool new_session = true;
  bool controlling_tty = false;  // stdio[0] is a terminal's slave
};

struct BrokerEvent {
  enum Kind {
    kNone,         // nothing to read now
    kReady,        // pid = the broker; path = its scope; cgroup_kill
    kSpawned,      // id; pid; pidfd; path = the call's leaf
    kSpawnFailed,  // id; error (code, syscall, path as the broker saw them)
    kExited,       // id; status
    kClosed,       // the broker is gone (before kReady: error says why)
  };
  Kind kind = kNone;
  uint64_t id = 0;
  pid_t pid = -1;  // in this process's PID namespace (read from the pidfd)
  Fd pidfd;
  std::string path;
  bool cgroup_kill = false;
  SysError error;
  ExitStatus status;
};

class BrokerClient {
 public:
  BrokerClient() = default;
  BrokerClient(BrokerClient&&) = default;
  BrokerClient& operator=(BrokerClient&&) = default;

  // Starts the broker process (through the wrapper) and returns without
  // waiting: its kReady (or kClosed) arrives on socket_fd().
  static SysError start(const BrokerLaunch& launch, ChildStack& stack, BrokerClient* out);

  int socket_fd() const { return sock_.get(); }
  // The process start() created (systemd-run, which becomes the broker): our
  // child, so reap it once this turns readable.
  int process_pidfd() const { return process_.get(); }
  pid_t process_pid() const { return process_pid_; }
  bool ready() const { return ready_; }
  const std::string& scope() const { return scope_; }

  // Queues one request and sends what the socket takes without blocking.
  // *id is echoed in the replies for it.
  SysError send_spawn(const BrokerSpawn& spawn, uint64_t* id);
  bool wants_write() const { return !queue_.empty(); }
  // Sends queued requests until the socket would block.
  SysError flush();
  // Parses one message if one is waiting (kind kNone if not).
  SysError receive(BrokerEvent* out);
  // Blocks up to timeout_ms for kReady; *out is kReady, kClosed, or kNone on timeout.
  SysError wait_ready(int timeout_ms, BrokerEvent* out);
  // What the wrapper wrote to stderr (systemd-run's error), read so far.
  const std::string& diagnostics();
  // Non-blocking: reaps the broker process once it has exited.
  SysError reap_process(ExitStatus* out);
  // Closes the socket: the broker kills whatever is left in its leaves and
  // exits (systemd then removes the scope).
  void close();

 private:
  struct Outgoing {
    std::vector<char> bytes;
    std::vector<Fd> fds;
  };
  Fd sock_;
  Fd process_;
  Fd stderr_;  // read end of the wrapper's stderr, until the broker is ready
  pid_t process_pid_ = -1;
  bool ready_ = false;
  std::string scope_;
  std::string diagnostics_;
  std::deque<Outgoing> queue_;
  uint64_t next_id_ = 0;
};

}  // namespace proctree
