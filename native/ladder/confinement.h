// What holds one call's tree, as the kill ladder sees it. Four tiers
// implement it, one file each: cgroup (a cgroup v2 leaf), pidns (a PID
// namespace whose init is our shim), subreaper (a shim that every orphan of
// the tree is reparented to), session (a new session; the weakest). The
// ladder (ladder.h) holds the policy and calls only this interface; each
// tier says how it lists, confirms, freezes, kills and proves empty.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "kernel/members.h"
#include "kernel/sys_error.h"

namespace proctree {

enum class Tier { kCgroup, kSystemd, kPidns, kSubreaper, kPgroup };
const char* tier_name(Tier t);

// What a whole tree used, escapees included where the tier can see them.
struct Usage {
  bool known = false;
  double user_ms = 0;
  double system_ms = 0;
  long long memory_peak = -1;  // bytes; -1 where the memory controller is not delegated
  long long pids_peak = -1;    // pids.peak; -1 where the pids controller (or the file) is not there
  // The call's verdicts (kernel/limits.h): memory.events oom_kill and
  // pids.events max of its leaf grew while it ran.
  bool oom_killed = false;
  bool pids_limited = false;
  // Where the CPU times come from: "cgroup" (cpu.stat of the call's cgroup:
  // every process that was ever in it) or "rusage" (the processes reaped by
  // the main process, or by the shim: every process of its tree).
  const char* source = "";
};

// Where a tier sends writes that can take long: cgroup.kill of a tree of a
// thousand processes takes tens of ms in the kernel, cgroup.freeze of a large
// subtree several. The owner does them later, in order, off its thread (the
// event loop's thread pool); without one, they are done at once.
class SlowWrites {
 public:
  virtual ~SlowWrites() = default;
  virtual void write_later(const std::string& path, const char* value) = 0;
};

class Confinement {
 public:
  virtual ~Confinement() = default;
  virtual Tier tier() const = 0;
  // How this tier proves a tree empty, reported as CleanupReport.verified:
  // cgroup.events | pidns | subreaper | none.
  virtual const char* verified() const = 0;

  // The live members now (a snapshot; a member may fork or exit right after).
  virtual SysError members(std::vector<pid_t>* out) const = 0;
  // Keeps in *held those that are members now (see kernel/members.h).
  virtual SysError confirm(std::vector<Held>* held) const = 0;
  // Whether members() and confirm() may run on another thread while this
  // one goes on with the rest (the ladder's pass over a large tree): they
  // then read only what stays the same until the ladder ends. Whatever they
  // would open or look up on first use is done now, on the owner's thread.
  virtual bool share_reads() const { return false; }
  // Whether the tree is empty now, as far as this tier can tell.
  virtual bool empty() const = 0;
  // Emptiness raises no event in this tier: look again this often (ms).
  // 0: the owner re-checks on the tier's own events.
  virtual int poll_ms() const { return 0; }

  // Freezing (cgroup.freeze): a frozen member cannot fork or exit while we
  // read and signal. Tiers that cannot freeze keep the defaults.
  virtual bool can_freeze() const { return false; }
  // now: write at once even where writes are deferred (kill() waits for the
  // freeze to show before it signals).
  virtual SysError set_frozen(bool /*frozen*/, bool /*now*/ = false) { return SysError::none(); }
  virtual bool frozen() const { return false; }

  enum class Kill {
    kOneShot,  // the kernel kills the whole tree, forks included: wait for empty
    kRound,    // one SIGKILL round over the members: repeat until empty
  };
  // SIGKILL to the whole tree. The default is a round over the confirmed
  // members, for tiers where the kernel offers nothing better.
  virtual Kill kill_all();
  // The same, with nothing deferred: for a synchronous shutdown, where no
  // deferred write would land before the process exits.
  virtual Kill kill_all_now() { return kill_all(); }

  // The tree's resource usage, read once it is empty and before release()
  // (the cgroup's own files go with it). Tiers that cannot tell leave it.
  virtual void read_usage(Usage*) const {}

  // Releases what the tier made for the call (its cgroup directories), once
  // the tree is empty.
  virtual SysError release() { return SysError::none(); }
  // If the tree is empty, releases it and returns true (a failed release is
  // reported in *error); else false.
  virtual bool release_if_empty(SysError* error);
  // What the tier made for this call may not serve another call later: a
  // ladder ran on it, or it was frozen or killed, and a deferred write may
  // still be on its way; or something outside names it (a job id).
  virtual void retire() {}
  // Closes what the tier kept open for the call's end (a leaf's
  // descriptors); whoever needs them later reopens them.
  virtual void close_descriptors() {}

 protected:
  // One round of `sig` to every confirmed member: how many got it.
  int signal_members(int sig, SysError* error);
};

}  // namespace proctree
