// limits.cc: memory.max/memory.swap.max, pids.max and cpu.max of a call's
// leaf, the counters that tell whether the call hit them, and which
// controllers a leaf made in a directory would get (see limits.h).
#include "kernel/limits.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernel/fd.h"

namespace proctree {

namespace {

struct ControllerName {
  LimitController bit;
  const char* name;
};
constexpr ControllerName kControllers[] = {
    {kLimitMemory, "memory"},
    {kLimitPids, "pids"},
    {kLimitCpu, "cpu"},
};

std::string join(const std::string& dir, const char* name) { return dir + "/" + name; }

// ENOENT when the file does not exist (the controller is off for this cgroup).
SysError write_at(int dir_fd, const std::string& dir_path, const char* name, const std::string& value) {
  Fd fd(openat(dir_fd, name, O_WRONLY | O_CLOEXEC));
  if (!fd) return SysError::from_errno("open", join(dir_path, name));
  ssize_t n;
  do {
    n = write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return SysError::from_errno("write", join(dir_path, name));
  return SysError::none();
}

// A small cgroup file, whole. *exists false (and no error) when it is missing.
SysError read_at(int dir_fd, const std::string& dir_path, const char* name, std::string* out, bool* exists) {
  out->clear();
  Fd fd(openat(dir_fd, name, O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) {
      *exists = false;
      return SysError::none();
    }
    return SysError::from_errno("open", join(dir_path, name));
  }
  *exists = true;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SysError::from_errno("read", join(dir_path, name));
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  return SysError::none();
}

bool parse_u64(const char* s, uint64_t* out) {
  if (*s < '0' || *s > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0) return false;
  *out = v;
  return true;
}

// The value of `key` in a flat-keyed file ("oom_kill 3\n...").
bool keyed_value(const std::string& text, const char* key, uint64_t* out) {
  const size_t klen = std::strlen(key);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    if (eol - pos > klen && text.compare(pos, klen, key) == 0 && text[pos + klen] == ' ') {
      return parse_u64(text.c_str() + pos + klen + 1, out);
    }
    pos = eol + 1;
  }
  return false;
}

// One number file (memory.peak, pids.peak).
SysError read_number(int dir_fd, const std::string& dir_path, const char* name, bool* has, uint64_t* out) {
  std::string text;
  bool exists = false;
  if (SysError e = read_at(dir_fd, dir_path, name, &text, &exists)) return e;
  *has = exists && parse_u64(text.c_str(), out);
  return SysError::none();
}

// Writes value to name unless the file is missing and missing_ok.
SysError set_or_skip(int dir_fd, const std::string& dir_path, const char* name, const std::string& value,
                     bool missing_ok) {
  SysError e = write_at(dir_fd, dir_path, name, value);
  if (e && e.err == ENOENT && missing_ok) return SysError::none();
  return e;
}

unsigned parse_controllers(const std::string& text) {
  unsigned bits = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n')) ++pos;
    size_t end = pos;
    while (end < text.size() && text[end] != ' ' && text[end] != '\n') ++end;
    for (const ControllerName& c : kControllers) {
      if (end - pos == std::strlen(c.name) && text.compare(pos, end - pos, c.name) == 0) bits |= c.bit;
    }
    pos = end;
  }
  return bits;
}

std::string parent_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return path.substr(0, slash);
}

SysError read_controllers_at(const std::string& dir, const char* file, unsigned* out) {
  Fd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return SysError::from_errno("open", dir);
  return read_controller_file(fd.get(), dir, file, out);
}

// Whether the cgroup at dir has processes of its own (not below it).
bool holds_processes(const std::string& dir) {
  Fd fd(open(join(dir, "cgroup.procs").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  char c;
  ssize_t n;
  do {
    n = read(fd.get(), &c, 1);
  } while (n < 0 && errno == EINTR);
  return n == 1;
}

}  // namespace

const char* limit_controller_name(LimitController c) {
  for (const ControllerName& n : kControllers) {
    if (n.bit == c) return n.name;
  }
  return "?";
}

unsigned Limits::controllers() const {
  unsigned bits = 0;
  if (memory_bytes) bits |= kLimitMemory;
  if (pids) bits |= kLimitPids;
  if (cpu != 0) bits |= kLimitCpu;
  return bits;
}

bool cpu_max_text(double cpus, std::string* out) {
  if (!std::isfinite(cpus) || cpus <= 0) return false;
  double quota = std::round(cpus * static_cast<double>(kCpuPeriodUs));
  // The kernel's bounds: at least 1 ms, and it takes 64-bit microseconds;
  // far beyond any machine's CPUs is refused here rather than overflowing.
  if (quota < 1000 || quota > 1e15) return false;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%" PRIu64 " %" PRIu64, static_cast<uint64_t>(quota), kCpuPeriodUs);
  *out = buf;
  return true;
}

SysError apply_limits(int leaf_fd, const std::string& leaf_path, const Limits& limits) {
  std::string cpu = "max";
  if (limits.cpu != 0 && !cpu_max_text(limits.cpu, &cpu)) return SysError::of(EINVAL, "cpu.max", leaf_path);
  const bool mem = limits.memory_bytes != 0;
  // memory.max first, then memory.swap.max: 0 where the kernel accounts swap
  // (without swap accounting the file is missing, and swap is not charged
  // to the cgroup at all).
  if (SysError e = set_or_skip(leaf_fd, leaf_path, "memory.max",
                               mem ? std::to_string(limits.memory_bytes) : "max", !mem)) {
    return e;
  }
  if (SysError e = set_or_skip(leaf_fd, leaf_path, "memory.swap.max", mem ? "0" : "max", true)) return e;
  const bool pids = limits.pids != 0;
  if (SysError e = set_or_skip(leaf_fd, leaf_path, "pids.max", pids ? std::to_string(limits.pids) : "max", !pids)) {
    return e;
  }
  const bool cpu_set = limits.cpu != 0;
  // "max 100000": the period back to the default too.
  return set_or_skip(leaf_fd, leaf_path, "cpu.max", cpu_set ? cpu : "max " + std::to_string(kCpuPeriodUs),
                     !cpu_set);
}

SysError clear_limits(int leaf_fd, const std::string& leaf_path) { return apply_limits(leaf_fd, leaf_path, Limits{}); }

SysError read_limit_counters(int leaf_fd, const std::string& leaf_path, LimitCounters* out) {
  *out = LimitCounters{};
  std::string text;
  bool exists = false;
  if (SysError e = read_at(leaf_fd, leaf_path, "memory.events", &text, &exists)) return e;
  out->has_oom_kill = exists && keyed_value(text, "oom_kill", &out->oom_kill);
  if (SysError e = read_at(leaf_fd, leaf_path, "pids.events", &text, &exists)) return e;
  out->has_pids_max = exists && keyed_value(text, "max", &out->pids_max);
  if (SysError e = read_at(leaf_fd, leaf_path, "pids.events.local", &text, &exists)) return e;
  out->has_pids_local_max = exists && keyed_value(text, "max", &out->pids_local_max);
  if (SysError e = read_number(leaf_fd, leaf_path, "memory.peak", &out->has_memory_peak, &out->memory_peak)) return e;
  return read_number(leaf_fd, leaf_path, "pids.peak", &out->has_pids_peak, &out->pids_peak);
}

LimitVerdict limit_verdict(const LimitCounters& before, const LimitCounters& after) {
  LimitVerdict v;
  v.oom_killed = after.has_oom_kill && after.oom_kill > (before.has_oom_kill ? before.oom_kill : 0);
  v.pids_limited = (after.has_pids_max && after.pids_max > (before.has_pids_max ? before.pids_max : 0)) ||
                   (after.has_pids_local_max &&
                    after.pids_local_max > (before.has_pids_local_max ? before.pids_local_max : 0));
  return v;
}

SysError read_controller_file(int dir_fd, const std::string& dir_path, const char* file, unsigned* out) {
  std::string text;
  bool exists = false;
  if (SysError e = read_at(dir_fd, dir_path, file, &text, &exists)) return e;
  if (!exists) return SysError::of(ENOENT, "open", join(dir_path, file));
  *out = parse_controllers(text);
  return SysError::none();
}

SysError enable_controllers(int dir_fd, const std::string& dir_path, unsigned which) {
  std::string value;
  for (const ControllerName& c : kControllers) {
    if (!(which & c.bit)) continue;
    if (!value.empty()) value += ' ';
    value += '+';
    value += c.name;
  }
  if (value.empty()) return SysError::none();
  return write_at(dir_fd, dir_path, "cgroup.subtree_control", value);
}

SysError controller_report(const std::string& mount, const std::string& dir, unsigned needed,
                           ControllerReport* out) {
  *out = ControllerReport{};
  if (SysError e = read_controllers_at(dir, "cgroup.subtree_control", &out->available)) return e;
  out->missing = needed & ~out->available;
  if (!out->missing) return SysError::none();
  unsigned here = 0;
  if (SysError e = read_controllers_at(dir, "cgroup.controllers", &here)) return e;
  const bool busy = dir != mount && holds_processes(dir);  // the root is exempt

  // Each missing controller's fix; controllers with the same fix share it
  // ("memory, pids: enable them in ...").
  struct Fix {
    std::string names;
    std::string text;
  };
  std::vector<Fix> fixes;
  for (const ControllerName& c : kControllers) {
    if (!(out->missing & c.bit)) continue;
    std::string text;
    if (here & c.bit) {
      // Passed down to dir, not enabled for its children.
      text = "enable in " + join(dir, "cgroup.subtree_control");
    } else {
      // The nearest cgroup above that has it: enable it from there down.
      std::string top;
      for (std::string p = dir; p.size() > mount.size();) {
        p = parent_of(p);
        unsigned has = 0;
        if (read_controllers_at(p, "cgroup.controllers", &has)) break;
        if (has & c.bit) {
          top = p;
          break;
        }
      }
      if (top.empty()) {
        text = "not on this cgroup2 hierarchy at " + mount +
               " (its cgroup.controllers): bound to a cgroup v1 hierarchy or not delegated here; boot with "
               "cgroup_no_v1=<names> (or systemd.unified_cgroup_hierarchy=1)";
      } else {
        text = "enable in " + join(top, "cgroup.subtree_control") +
               " and in each cgroup.subtree_control below it down to " + join(dir, "cgroup.subtree_control");
      }
    }
    auto same = std::find_if(fixes.begin(), fixes.end(), [&](const Fix& f) { return f.text == text; });
    if (same == fixes.end()) {
      fixes.push_back(Fix{c.name, text});
    } else {
      same->names += std::string(",") + c.name;
    }
  }
  for (const Fix& f : fixes) {
    if (!out->reason.empty()) out->reason += "; ";
    std::string text = f.text;
    size_t at = text.find("<names>");
    if (at != std::string::npos) text.replace(at, 7, f.names);
    out->reason += f.names + ": " + text;
  }
  // memory is a domain controller: the kernel refuses it (EBUSY) for the
  // children of a cgroup with processes of its own. pids and cpu are
  // threaded controllers, which it does enable there, but that makes the
  // cgroup a threaded root, whose domain children (our subtrees) can hold no
  // process: no use for limits either.
  if (busy) {
    out->reason += "; " + dir +
                   " holds processes of its own, and the kernel gives controllers to the children of a cgroup only "
                   "when it has none (memory refused, pids and cpu would leave the children unable to hold "
                   "processes): move them into a leaf of their own first";
  }
  return SysError::none();
}

std::string subtree_parent(const CgroupLocation& loc) {
  const std::string& own = loc.own_path;
  if (own.size() <= loc.mount.size()) return own;  // the root: exempt from the rule
  const std::string up = parent_of(own);
  // Never the hierarchy's root: what sits there is the host's.
  if (up.size() <= loc.mount.size()) return own;
  const std::string name = own.substr(own.find_last_of('/') + 1);
  for (const char* unit : {".scope", ".service", ".slice"}) {
    const size_t n = std::strlen(unit);
    if (name.size() > n && name.compare(name.size() - n, n, unit) == 0) return own;
  }
  // A harness run as a tool call of another proctree harness: its leaf is
  // that call's, and beside it would be outside the call (its ladder, its
  // limits): never.
  if (up.compare(up.find_last_of('/') + 1, 9, "proctree-") == 0) return own;
  unsigned own_enabled = 0;
  unsigned up_enabled = 0;
  if (read_controllers_at(own, "cgroup.subtree_control", &own_enabled) ||
      read_controllers_at(up, "cgroup.subtree_control", &up_enabled)) {
    return own;
  }
  // Only where it brings what the harness's cgroup cannot have: memory.
  if ((own_enabled & kLimitMemory) || !(up_enabled & kLimitMemory)) return own;
  if (holds_processes(up)) return own;
  if (access(up.c_str(), W_OK) != 0 || access(join(up, "cgroup.procs").c_str(), W_OK) != 0) return own;
  return up;
}

SysError limits_reach(const std::string& mount, const std::string& parent, LimitsReach* out) {
  *out = LimitsReach{};
  unsigned enabled = 0;
  unsigned here = 0;
  if (SysError e = read_controllers_at(parent, "cgroup.subtree_control", &enabled)) return e;
  if (SysError e = read_controllers_at(parent, "cgroup.controllers", &here)) return e;
  const bool busy = parent != mount && holds_processes(parent);
  // Nothing is ours to enable beside processes: memory the kernel refuses
  // (EBUSY), and pids or cpu would make parent a threaded root, whose domain
  // children — our subtrees — could hold no process (every call would fail).
  out->enableable = busy ? 0u : here & ~enabled;
  out->available = enabled | out->enableable;
  ControllerReport r;
  if (SysError e = controller_report(mount, parent, kAllLimitControllers & ~out->enableable, &r)) return e;
  out->reason = r.reason;
  return SysError::none();
}

}  // namespace proctree
