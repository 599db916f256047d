#include "ladder/session_confinement.h"

#include <unistd.h>

#include <algorithm>

#include "kernel/proc_scan.h"

namespace proctree {

SysError SessionConfinement::members(std::vector<pid_t>* out) const {
  *out = session_members(leader_);
  return SysError::none();
}

SysError SessionConfinement::confirm(std::vector<Held>* held) const {
  // While we hold its pidfd, a live process keeps its number: its session
  // id, read now, is its own.
  held->erase(std::remove_if(held->begin(), held->end(), [this](const Held& h) { return getsid(h.pid) != leader_; }),
              held->end());
  return SysError::none();
}

bool SessionConfinement::empty() const { return session_members(leader_).empty(); }

}  // namespace proctree
