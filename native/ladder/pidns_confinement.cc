#include "ladder/pidns_confinement.h"

#include <signal.h>

#include "kernel/pidfd.h"

namespace proctree {

Confinement::Kill PidnsConfinement::kill_all() {
  pidfd_signal(shim_pidfd_, SIGKILL);
  return Kill::kOneShot;
}

}  // namespace proctree
