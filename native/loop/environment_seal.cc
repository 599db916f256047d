// A sealed call (`seal: true`, the cgroup tier only): the call's leaf as
// the cgroup tier makes it, and in it, born there by CLONE_INTO_CGROUP, the
// shim (`proctree-helper seal`, helper/shim.cc) as init of new user, PID and
// mount namespaces. The shim roots a cgroup namespace at the leaf, covers
// /proc and /sys/fs/cgroup with its own, hides the service managers'
// sockets, and forks the command, which holds no capability when it execs
// (helper/seal.h). From outside it is a cgroup-tier call: the ladder
// freezes, signals and cgroup.kills the leaf, cgroup.events proves it
// empty; the shim reports the command's start and exit as it does for the
// pidns tier, and is itself no member of the tree (CgroupConfinement's init).
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "ladder/cgroup_confinement.h"
#include "loop/environment.h"

namespace proctree {

SysError Environment::spawn_sealed(const SpawnOptions& opts, SpawnRequest req, SpawnedCall* out) {
  // As the pidns tier's init (spawn_shim), with the seal's steps added.
  Fd ours, theirs;
  if (SysError e = shim_request(opts, "seal", &req, &ours, &theirs)) return e;
  req.pdeathsig = SIGKILL;
  // Always a user namespace, root included: it owns the mount and cgroup
  // namespaces, and maps the harness's uid and gid to themselves (0 to 0 as
  // root), so files keep their owner. The cgroup namespace is the shim's own
  // unshare, once it is in the leaf.
  req.ns_flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS;
  // A harness that is not root is not uid 0 in that namespace either: its
  // shim would lose every capability at its exec. It keeps the two it seals
  // with (mounts and the cgroup namespace; the bounding set it empties for
  // the command), and the command drops them.
  req.ambient_caps = (1U << CAP_SYS_ADMIN) | (1U << CAP_SETPCAP);
  if (req.inherit_env) snapshot_environ(&req);

  uint64_t id = next_call_id();
  CgroupDir leaf;
  CpuCounters base;
  SpawnResult proc;
  // The shim's pidfd is nobody else's until spawn_process returns.
  req.birth_kill_is_error = true;
  SysError e = start_in_leaf(opts, id, &req, &leaf, &base, out, [&](CgroupDir&) { return spawn_process(req, stack_, &proc); });
  if (e) {
    // The helper itself could not start: say so, not "spawn <file> ENOENT".
    if (std::string(e.syscall) == "execve") e = SysError::of(e.err, "proctree-helper", opts.helper);
    return e;
  }
  theirs.reset();
  out->id = id;
  out->pid = -1;  // reported by the shim: a kStarted event follows
  out->shim = proc.pid;
  out->cgroup = leaf.path();
  out->method = proc.method;
  leaf.close();
  auto confinement = std::make_unique<CgroupConfinement>(std::move(leaf), Tier::kCgroup, &writes_);
  confinement->reuse_into(&subtrees_, base);
  confinement->set_init(proc.pid);
  return adopt(new Call(this, id, std::move(proc), std::move(confinement), std::move(ours)), out);
}

}  // namespace proctree
