#include "ladder/confinement.h"

#include <signal.h>

#include "kernel/pidfd.h"

namespace proctree {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kCgroup: return "cgroup";
    case Tier::kSystemd: return "systemd";
    case Tier::kPidns: return "pidns";
    case Tier::kSubreaper: return "subreaper";
    default: return "pgroup";
  }
}

int Confinement::signal_members(int sig, SysError* error) {
  std::vector<pid_t> pids;
  if (SysError e = members(&pids)) {
    if (error && !*error) *error = e;
    return 0;
  }
  int n = 0;
  SysError e = for_each_confirmed(
      pids, [this](std::vector<Held>* held) { return confirm(held); },
      [&](Held& h) {
        if (pidfd_signal(h.pidfd.get(), sig) == 0) ++n;
      });
  if (e && error && !*error) *error = e;
  return n;
}

bool Confinement::release_if_empty(SysError* error) {
  if (!empty()) return false;
  *error = release();
  return true;
}

Confinement::Kill Confinement::kill_all() {
  signal_members(SIGKILL, nullptr);
  return Kill::kRound;
}

}  // namespace proctree
