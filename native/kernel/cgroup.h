// cgroup v2: where the hierarchy is mounted, where the harness sits in it, and
// the few files a call cgroup is driven through (procs, events, freeze, kill).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

struct CgroupLocation {
  std::string mount;     // where cgroup2 is mounted, e.g. /sys/fs/cgroup
  std::string own;       // the harness's cgroup relative to the hierarchy root
  std::string own_path;  // mount + own, as an absolute path
};

// Reads /proc/self/mountinfo and /proc/self/cgroup. Never assumes a mount
// point: hybrid hosts mount v2 at .../unified, pure-v2 hosts at /sys/fs/cgroup.
SysError locate_cgroup2(CgroupLocation* out);

// Relative (hierarchy) path of a process's cgroup v2, from /proc/<pid>/cgroup.
bool read_pid_cgroup(pid_t pid, std::string* out);

struct CgroupEvents {
  bool populated = false;
  bool frozen = false;
};

// One cgroup directory that we created and will remove.
class CgroupDir {
 public:
  CgroupDir() = default;
  // mkdir + open. EEXIST is an error unless allow_existing.
  static SysError create(const std::string& path, bool allow_existing, CgroupDir* out);

  const std::string& path() const { return path_; }
  int dir_fd() const { return dir_.get(); }
  int procs_fd() const { return procs_.get(); }
  bool valid() const { return dir_.valid(); }

  SysError read_events(CgroupEvents* out) const;
  SysError read_procs(std::vector<pid_t>* out) const;
  SysError write_file(const char* name, const char* value) const;
  bool has_file(const char* name) const;
  // For the clone() fallback, where the child migrates itself.
  SysError open_procs_for_write();
  // rmdir; fails with EBUSY while populated or while it has children.
  SysError remove();
  // Closes the descriptors without removing the directory.
  void close();

 private:
  std::string path_;
  Fd dir_;
  Fd procs_;   // cgroup.procs, O_RDWR: migration target for the clone fallback
  mutable Fd events_;  // cgroup.events, opened once, re-read with pread
};

}  // namespace proctree
