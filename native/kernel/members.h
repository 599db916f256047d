// Signalling the members of a tree by pidfd, safely against PID reuse: a
// member is first held by a pidfd, then its membership is confirmed (by the
// tier's own test: re-reading cgroup.procs, re-walking the shim's
// descendants, the session id), and only then signalled through the pidfd.
// A number listed again while we hold its pidfd is that process; if the
// process died and the number went to someone else meanwhile, the pidfd
// still names the dead one and the signal fails with ESRCH.
//
// Work goes in batches bounded by the descriptors we may open, so a tree of
// thousands under a low RLIMIT_NOFILE is still covered (and a descriptor
// shortage is reported, never a silent empty pass).
#pragma once

#include <sys/types.h>

#include <functional>
#include <vector>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

struct Held {
  pid_t pid;
  Fd pidfd;
};

// Removes from *held those that are not members now.
using ConfirmMembers = std::function<SysError(std::vector<Held>* held)>;

// Members held at once by default.
constexpr size_t kHeldBatch = 256;

// For each of `pids` that is confirmed a member: fn(held), `batch` held and
// confirmed at a time (fn may take the pidfd). The last batch's pidfds go to
// *keep_last, if given, instead of being closed (the earlier ones are closed
// before the next batch is opened: a shortage of descriptors splits a
// batch). Returns the first error that kept some member from being held
// (EMFILE when not even one pidfd could be opened) or confirmed; the others
// were still handled.
SysError for_each_confirmed(const std::vector<pid_t>& pids, const ConfirmMembers& confirm,
                            const std::function<void(Held&)>& fn, size_t batch = kHeldBatch,
                            std::vector<Fd>* keep_last = nullptr);

// Keeps the entries of *held whose pid is in `listed` (which it sorts).
void keep_listed(std::vector<Held>* held, std::vector<pid_t>* listed);

}  // namespace proctree
