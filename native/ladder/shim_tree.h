// What the pidns and subreaper tiers share: the call's main process is our
// shim (the helper executable, native/helper/shim.cc), which started the
// command and reaps every process of the tree, because every orphan of the
// tree is reparented to it (it is PID 1 of a namespace, or a subreaper). So
// the tree is "the shim's live descendants", and the shim's own exit (it
// exits once it has no child left) proves the tree empty.
#pragma once

#include <sys/types.h>

#include "kernel/fd.h"
#include "ladder/confinement.h"

namespace proctree {

class ShimTree : public Confinement {
 public:
  // shim_pidfd: borrowed; the call owns it.
  ShimTree(pid_t shim_pid, int shim_pidfd) : shim_pid_(shim_pid), shim_pidfd_(shim_pidfd) {}

  SysError members(std::vector<pid_t>* out) const override;
  // Re-walks the shim's descendants: a held pid listed again is a member.
  SysError confirm(std::vector<Held>* held) const override;
  bool empty() const override;

 protected:
  pid_t shim_pid_;
  int shim_pidfd_;
};

}  // namespace proctree
