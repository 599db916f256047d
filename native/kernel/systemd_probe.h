// Whether the systemd tier can work for this harness: is there a systemd
// user manager to ask for a delegated scope? Cheap (no process started): it
// finds systemd-run on PATH and connects to the manager's private socket
// ($XDG_RUNTIME_DIR/systemd/private, what systemd-run --user tries first)
// or else the user bus ($DBUS_SESSION_BUS_ADDRESS, or $XDG_RUNTIME_DIR/bus),
// and checks that whoever listens there runs as our uid (SO_PEERCRED). A
// stale socket of a manager that is gone fails with ECONNREFUSED.
//
// Whether the harness's own cgroup is writable (then the plain cgroup tier
// is the better choice) is the delegation probe of kernel/probe.h. The final
// proof is starting the broker (kernel/broker_client.h): its kReady, or
// systemd-run's message on failure.
#pragma once

#include <string>
#include <vector>

namespace proctree {

struct UserManagerProbe {
  bool ok = false;
  int err = 0;            // errno when !ok
  const char* syscall = "";
  std::string detail;     // what was tried (the socket, or what is missing)
  std::string systemd_run;  // absolute path of systemd-run, when found
  std::string socket;     // the socket that answered
};

// env: the environment the broker would be started with ("NAME=value").
UserManagerProbe probe_user_manager(const std::vector<std::string>& env);

// The first executable `name` in the PATH of env ("" when none).
std::string find_in_path(const std::string& name, const std::vector<std::string>& env);

}  // namespace proctree
