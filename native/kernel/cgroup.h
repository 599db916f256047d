// cgroup v2: where the hierarchy is mounted, where the harness sits in it, and
// the files a call cgroup is driven through (procs, events, freeze, kill).
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

// One cgroup2 mount from mountinfo: what it shows (root, relative to the
// hierarchy) and where.
struct Cgroup2Mount {
  std::string root;
  std::string mount;
  std::string device;  // maj:min: the same for every mount of one hierarchy
};
// Every cgroup2 mount in this mountinfo text, in order.
std::vector<Cgroup2Mount> cgroup2_mounts(const std::string& mountinfo);
// One mount per hierarchy: the one that shows the most of it (bind-mounted
// copies of a part of it are skipped). For walking every hierarchy.
std::vector<Cgroup2Mount> cgroup2_hierarchies(const std::string& mountinfo);
bool read_mountinfo(std::string* out);

// Reads /proc/self/mountinfo and /proc/self/cgroup. Never assumes a mount
// point (hybrid hosts mount v2 at .../unified, pure-v2 hosts at
// /sys/fs/cgroup), and of several cgroup2 mounts (bind mounts, a chroot's)
// takes one that contains the harness's own cgroup.
SysError locate_cgroup2(CgroupLocation* out);
// The same choice from the two files' text (for tests, and for `proctree ps`).
SysError locate_cgroup2_in(const std::string& mountinfo, const std::string& self_cgroup,
                           CgroupLocation* out);

// A cgroup's id (the kernel's kernfs node id: what sock_diag's cgroup
// filter and PIDFD_GET_INFO report): its file handle, else its inode number.
SysError cgroup_id_of(const std::string& path, unsigned long long* id);

struct CgroupEvents {
  bool populated = false;
  bool frozen = false;
};

// PROCTREE_TEST_NO_CGROUP_KILL=1 makes every cgroup look as if the kernel had
// no cgroup.kill (< 5.14), so that path runs in tests on a newer kernel.
bool cgroup_kill_disabled_for_test();

// One cgroup directory that we created and will remove.
class CgroupDir {
 public:
  CgroupDir() = default;
  // mkdir + open. EEXIST is an error unless allow_existing.
  static SysError create(const std::string& path, bool allow_existing, CgroupDir* out);
  // open only: a directory that must exist already.
  static SysError open_existing(const std::string& path, CgroupDir* out);

  const std::string& path() const { return path_; }
  int dir_fd() const { return dir(); }
  // Made (or opened) and not removed yet.
  bool valid() const { return !path_.empty(); }

  SysError read_events(CgroupEvents* out) const;
  // Every member of this cgroup and of every cgroup below it, whatever its
  // name or depth (a tool call may make nested cgroups of its own).
  SysError read_procs(std::vector<pid_t>* out) const;
  SysError write_file(const char* name, const char* value) const;
  // A small file of this cgroup (cpu.stat, memory.peak), whole.
  SysError read_file(const char* name, std::string* out) const;
  // cpu.stat, whole: opened once and re-read with pread, as cgroup.events
  // (a kept leaf is read at the end of every call it holds).
  SysError read_cpu_stat(std::string* out) const;
  bool has_file(const char* name) const;
  // cgroup.max.descendants and cgroup.max.depth both read "max", as in a
  // new cgroup. Anyone who may write the cgroup's files may lower them
  // (then no cgroup can be made below it); false also when unreadable.
  bool nesting_unlimited() const;
  // cgroup.kill exists (Linux 5.14; never in the root cgroup).
  bool has_kill() const;
  // One SIGKILL round over the whole subtree: cgroup.kill; or, on kernels
  // without it (or when it cannot be written), sigkill_round().
  // Repeat until read_events says populated 0. *one_shot: whether
  // cgroup.kill took it (every process below, this round's forks included).
  SysError kill_round(bool* one_shot = nullptr) const;
  // Freeze (so no member forks between our read and its kill), SIGKILL
  // every member of this directory by pidfd, thaw (the kill lands as the
  // tasks thaw).
  SysError sigkill_round() const;
  // rmdir of this directory alone; true when it is gone (which proves it
  // was empty and had no cgroups below it).
  bool remove_if_empty();
  // rmdir of this directory and every cgroup below it, deepest first;
  // EBUSY while any of them is populated.
  SysError remove();
  // Closes the descriptors without removing the directory (the next use
  // opens it again by path).
  void close();

 private:
  int dir() const;
  // A file of this cgroup, for reading.
  Fd open_file(const char* name) const;
  // A small file of this cgroup through *kept, opened on first use (by
  // path when the directory is not open) and re-read from its start.
  SysError read_kept(Fd* kept, const char* name, char* buf, size_t cap, size_t* n) const;

  std::string path_;
  mutable Fd dir_;
  mutable Fd events_;  // cgroup.events, opened once, re-read with pread
  mutable Fd stat_;    // cpu.stat, the same way
  mutable Fd max_descendants_;  // cgroup.max.descendants, the same way
  mutable Fd max_depth_;        // cgroup.max.depth, the same way
};

}  // namespace proctree
