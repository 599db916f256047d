#include "ladder/shim_tree.h"

#include <poll.h>

#include "kernel/proc_scan.h"

namespace proctree {

SysError ShimTree::members(std::vector<pid_t>* out) const {
  *out = empty() ? std::vector<pid_t>{} : live_descendants(shim_pid_);
  return SysError::none();
}

SysError ShimTree::confirm(std::vector<Held>* held) const {
  std::vector<pid_t> listed;
  members(&listed);
  keep_listed(held, &listed);
  return SysError::none();
}

bool ShimTree::empty() const {
  // The shim's pidfd turns readable when it exits; its number is ours until
  // the call reaps it, so the walk above cannot start from someone else.
  pollfd p{shim_pidfd_, POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;
}

}  // namespace proctree
