// Limits a tool call cannot exceed, in the cgroup tier: a call's leaf gets
// memory.max (with memory.swap.max 0, so the cap is not dodged by swapping),
// pids.max and cpu.max before the command runs, and they are cleared back to
// "max" before a reused leaf serves its next call. The verdicts come from the
// kernel's own counters: memory.events oom_kill and pids.events max grew
// during the call (snapshot before, read after), memory.peak (5.19+) and
// pids.peak where the kernel has them.
//
// A limit needs its controller enabled in the subtree_control of the leaf's
// parent, which cgroup v2 allows only for controllers that its own parent
// passed down, and for memory (a domain controller) only in a cgroup that
// holds no process of its own (the "no internal processes" rule; the root is
// exempt; pids and cpu are threaded controllers, exempt too). controller_report() says
// which of them a leaf made in a given directory would get, and for each one
// it would not, what to do about it: never silently unlimited.
//
// Plain syscalls and file IO on directory descriptors; no threads, no napi.
#pragma once

#include <cstdint>
#include <string>

#include "kernel/cgroup.h"
#include "kernel/sys_error.h"

namespace proctree {

// The controllers limits are made of, as bits.
enum LimitController : unsigned {
  kLimitMemory = 1u << 0,
  kLimitPids = 1u << 1,
  kLimitCpu = 1u << 2,
};
constexpr unsigned kAllLimitControllers = kLimitMemory | kLimitPids | kLimitCpu;
// "memory", "pids", "cpu" (one bit only).
const char* limit_controller_name(LimitController c);

// The period cpu.max is written with: 100 ms, the kernel's default.
constexpr uint64_t kCpuPeriodUs = 100000;

struct Limits {
  // 0: no limit of that kind (written as "max" by apply_limits).
  uint64_t memory_bytes = 0;
  uint64_t pids = 0;
  // In CPUs: 0.5 is "50000 100000" in cpu.max, 2 is "200000 100000".
  double cpu = 0;

  // The controllers these limits need (a bit per non-zero field).
  unsigned controllers() const;
};

// cpu.max's text for `cpus` CPUs ("50000 100000"). false for a value the
// kernel would refuse: not finite, not positive, or a quota under its 1 ms
// minimum (fewer than 0.01 CPUs).
bool cpu_max_text(double cpus, std::string* out);

// Writes `limits` into the leaf open at leaf_fd (leaf_path: for errors):
// memory.max (+ memory.swap.max 0 where the kernel accounts swap), pids.max,
// cpu.max. A field of 0 is written as "max" where its file exists (that
// clears what an earlier call set in a reused leaf), and skipped where it
// does not. A non-zero field whose file is missing is ENOENT naming that
// file: the controller is not enabled for this leaf (see controller_report).
// EINVAL (syscall "cpu.max") for a cpu value cpu_max_text refuses; nothing
// is written then.
SysError apply_limits(int leaf_fd, const std::string& leaf_path, const Limits& limits);
// Every limit of the leaf back to "max" (the files that exist).
SysError clear_limits(int leaf_fd, const std::string& leaf_path);

// The kernel's counters of one leaf at one moment. Each has_ says whether
// this kernel (and the leaf's controllers) has that counter at all.
struct LimitCounters {
  bool has_oom_kill = false;
  uint64_t oom_kill = 0;         // memory.events oom_kill (this leaf and below)
  bool has_pids_max = false;
  uint64_t pids_max = 0;         // pids.events max: forks refused by pids.max
  // pids.events.local max (6.13+, where pids.events counts only this
  // cgroup's own limit): forks in this cgroup refused by any pids.max above.
  bool has_pids_local_max = false;
  uint64_t pids_local_max = 0;
  bool has_memory_peak = false;
  uint64_t memory_peak = 0;      // memory.peak, bytes (5.19+): since the leaf was made
  bool has_pids_peak = false;
  uint64_t pids_peak = 0;        // pids.peak (newer kernels): since the leaf was made
};
// Reads what exists; a file missing is has_ false, not an error.
SysError read_limit_counters(int leaf_fd, const std::string& leaf_path, LimitCounters* out);

// A call's verdict: counters before it ran and after it ended.
struct LimitVerdict {
  bool oom_killed = false;    // oom_kill grew
  bool pids_limited = false;  // pids.events max grew
};
LimitVerdict limit_verdict(const LimitCounters& before, const LimitCounters& after);

// The controllers named in a cgroup's cgroup.controllers or
// cgroup.subtree_control (dir_fd: the cgroup's directory), as bits.
SysError read_controller_file(int dir_fd, const std::string& dir_path, const char* file, unsigned* out);
// Writes "+memory +pids +cpu" (the bits of `which`) to the cgroup's
// cgroup.subtree_control. EBUSY for memory when the cgroup holds processes
// of its own (pids and cpu are allowed there).
SysError enable_controllers(int dir_fd, const std::string& dir_path, unsigned which);

// For leaves made in the cgroup `dir` (an absolute path below the cgroup2
// mount `mount`): which of the `needed` controllers they would get, and for
// those missing, why and the fix (controllers with one fix share it), e.g.
//   "memory: enable in /sys/fs/cgroup/harness/cgroup.subtree_control"
//   "memory,pids,cpu: not on this cgroup2 hierarchy at /sys/fs/cgroup/unified
//    (its cgroup.controllers): bound to a cgroup v1 hierarchy or not
//    delegated here; boot with cgroup_no_v1=memory,pids,cpu (or
//    systemd.unified_cgroup_hierarchy=1)"
// The reason also says when `dir` holds processes of its own, which keeps
// the kernel from enabling memory (a domain controller; pids and cpu, threaded
// ones, it allows there, but then the children cannot hold processes) until
// they move into a leaf.
struct ControllerReport {
  unsigned available = 0;  // in dir's cgroup.subtree_control
  unsigned missing = 0;    // needed & ~available
  std::string reason;      // empty when nothing is missing
};
SysError controller_report(const std::string& mount, const std::string& dir, unsigned needed,
                           ControllerReport* out);

// Where a harness's cgroup subtrees go: its own cgroup, or its parent when
// the harness already sits in a leaf of its own beside them — the layout of
// a measuring harness, or of a delegated service that moved itself out of
// the way (systemd's DelegateSubgroup=): there the parent distributes the
// memory controller (which a cgroup holding the harness cannot), holds no
// process, is writable, and the harness's leaf is no systemd unit (whose
// parent is systemd's slice, never ours) nor a proctree call's leaf (a
// harness run as another's tool call stays inside that call). Reads files
// only.
std::string subtree_parent(const CgroupLocation& loc);

// Which limits a leaf of a subtree made in `parent` can have: the
// controllers enabled in parent's cgroup.subtree_control, and those it may
// enable there itself (passed down to it, and parent holding no process of
// its own: memory the kernel refuses beside processes, and pids or cpu there
// would make parent a threaded root whose domain children cannot hold
// processes). `reason`: for the others, controller_report's why and fix;
// empty when all are reachable.
struct LimitsReach {
  unsigned available = 0;
  unsigned enableable = 0;  // of available: not enabled yet, ours to enable
  std::string reason;
};
SysError limits_reach(const std::string& mount, const std::string& parent, LimitsReach* out);

}  // namespace proctree
