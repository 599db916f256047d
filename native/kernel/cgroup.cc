#include "kernel/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "kernel/members.h"
#include "kernel/pidfd.h"
#include "kernel/procfs.h"

namespace proctree {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_field(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        char c = s[i + k];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// Reads what is left of fd into *out. ENODEV: a cgroup file whose cgroup
// was removed while we read it, which has nothing more to say. `single`: a
// file that fits one read (cpu.stat, cgroup.events): a seq_file fills a read
// as far as whole records go, so a short read of such a file is its end; a
// long file (cgroup.procs, mountinfo) can return short reads mid-way and is
// read until 0.
bool read_all(int fd, std::string* out, bool single = false) {
  out->clear();
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == ENODEV;
    }
    if (n == 0) return true;
    out->append(buf, static_cast<size_t>(n));
    if (single && static_cast<size_t>(n) < sizeof buf / 2) return true;
  }
}

bool read_small_file(const char* path, std::string* out) {
  Fd fd(open(path, O_RDONLY | O_CLOEXEC));
  return fd && read_all(fd.get(), out);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// Whether `path` is `root` or lies below it ("/a" contains "/a/b", not "/ab").
bool contains(const std::string& root, const std::string& path) {
  if (root == "/") return true;
  return path.compare(0, root.size(), root) == 0 && (path.size() == root.size() || path[root.size()] == '/');
}

// Appends the numbers listed one a line in text.
void parse_ids(const std::string& text, std::vector<pid_t>* out) {
  const char* p = text.c_str();
  while (*p) {
    char* end;
    long v = strtol(p, &end, 10);
    if (end == p) break;
    out->push_back(static_cast<pid_t>(v));
    p = end;
    while (*p == '\n') ++p;
  }
}

// The thread group (process) of thread `tid`, from the Tgid line of
// /proc/<tid>/status (a thread's directory is there by its id, though not
// listed); 0 when the thread is gone.
pid_t thread_group_of(pid_t tid) {
  std::string text;
  if (!read_small_file(("/proc/" + std::to_string(tid) + "/status").c_str(), &text)) return 0;
  size_t at = text.find("\nTgid:");
  if (at == std::string::npos) return 0;
  return static_cast<pid_t>(strtol(text.c_str() + at + 6, nullptr, 10));
}

// A threaded cgroup (cgroup.type "threaded", which a tool call may make
// below its leaf) refuses to list processes: reading its cgroup.procs fails
// with EOPNOTSUPP, because a process belongs to the threaded domain above
// it. Its members are the processes of the threads it holds: cgroup.threads
// maps to thread groups through /proc. Those already listed (by the domain
// this walk read first) are not listed twice.
SysError append_thread_groups(int dir, const std::string& path, std::vector<pid_t>* out) {
  Fd fd(openat(dir, "cgroup.threads", O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return SysError::none();
    return SysError::from_errno("open", path + "/cgroup.threads");
  }
  std::string text;
  if (!read_all(fd.get(), &text)) return SysError::from_errno("read", path + "/cgroup.threads");
  std::vector<pid_t> tids;
  parse_ids(text, &tids);
  for (pid_t tid : tids) {
    pid_t tgid = thread_group_of(tid);
    if (tgid > 0 && std::find(out->begin(), out->end(), tgid) == out->end()) out->push_back(tgid);
  }
  return SysError::none();
}

// Reads cgroup.procs of the directory fd into *out (appending).
SysError append_procs(int dir, const std::string& path, std::vector<pid_t>* out) {
  Fd fd(openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC));
  if (!fd) {
    // Removed while we walked: it has no members.
    if (errno == ENOENT) return SysError::none();
    if (errno == EOPNOTSUPP) return append_thread_groups(dir, path, out);
    return SysError::from_errno("open", path + "/cgroup.procs");
  }
  std::string text;
  if (!read_all(fd.get(), &text)) {
    if (errno == EOPNOTSUPP) return append_thread_groups(dir, path, out);
    return SysError::from_errno("read", path + "/cgroup.procs");
  }
  parse_ids(text, out);
  return SysError::none();
}

// The names of the directories directly below the directory fd, any name
// (a tool call may call its own cgroup ".x").
SysError subdirs(int dir, std::vector<std::string>* out) {
  out->clear();
  // A kernfs directory's link count is 2 + its subdirectories: most call
  // cgroups have none, and one statx spares the open and the reads of the
  // listing. (statx, not fstat: glibc before 2.33 has no fstat symbol.)
  struct statx st;
  if (statx(dir, "", AT_EMPTY_PATH, STATX_NLINK, &st) == 0 && (st.stx_mask & STATX_NLINK) && st.stx_nlink == 2) {
    return SysError::none();
  }
  int copy = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (copy < 0) return SysError::from_errno("open", ".");
  DIR* d = fdopendir(copy);
  if (!d) {
    SysError e = SysError::from_errno("fdopendir");
    ::close(copy);
    return e;
  }
  while (dirent* e = readdir(d)) {
    if (e->d_type != DT_DIR) continue;
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    out->push_back(e->d_name);
  }
  closedir(d);
  return SysError::none();
}

// Depth-first over the cgroup at `root` and everything below it, any depth,
// holding two descriptors at a time (it climbs back with ".."), so neither a
// deep chain nor a low RLIMIT_NOFILE stops it. pre(fd, path) runs on the way
// down; post(parent_fd, name) after a directory's children are done.
SysError walk_tree(int root, const std::string& root_path, const std::function<SysError(int, const std::string&)>& pre,
                   const std::function<void(int, const std::string&)>& post) {
  struct Level {
    std::vector<std::string> subdirs;
    size_t next = 0;
    std::string name;  // of this directory in its parent
  };
  Fd cur(openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cur) return SysError::from_errno("open", root_path);
  std::string path = root_path;
  std::vector<Level> stack;
  if (SysError e = pre(cur.get(), path)) return e;
  stack.emplace_back();
  if (SysError e = subdirs(cur.get(), &stack.back().subdirs)) return e;
  while (!stack.empty()) {
    Level& level = stack.back();
    if (level.next < level.subdirs.size()) {
      const std::string name = level.subdirs[level.next++];
      Fd child(openat(cur.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
      if (!child) continue;  // removed meanwhile
      cur = std::move(child);
      path += "/" + name;
      if (SysError e = pre(cur.get(), path)) return e;
      Level next;
      next.name = name;
      if (SysError e = subdirs(cur.get(), &next.subdirs)) return e;
      stack.push_back(std::move(next));
      continue;
    }
    std::string name = level.name;
    stack.pop_back();
    if (stack.empty()) break;
    Fd parent(openat(cur.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!parent) return SysError::from_errno("open", path + "/..");
    cur = std::move(parent);
    path.resize(path.size() - name.size() - 1);
    post(cur.get(), name);
  }
  return SysError::none();
}

}  // namespace

std::vector<Cgroup2Mount> cgroup2_mounts(const std::string& mountinfo) {
  std::vector<Cgroup2Mount> out;
  for (const std::string& line : split(mountinfo, '\n')) {
    // id parent maj:min root mountpoint opts [optional...] - fstype source super
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::vector<std::string> tail = split(line.substr(dash + 3), ' ');
    if (tail.empty() || tail[0] != "cgroup2") continue;
    std::vector<std::string> head = split(line.substr(0, dash), ' ');
    if (head.size() < 5) continue;
    out.push_back(Cgroup2Mount{unescape_mount_field(head[3]), unescape_mount_field(head[4]), head[2]});
  }
  return out;
}

std::vector<Cgroup2Mount> cgroup2_hierarchies(const std::string& mountinfo) {
  std::vector<Cgroup2Mount> out;
  for (const Cgroup2Mount& m : cgroup2_mounts(mountinfo)) {
    bool seen = false;
    for (Cgroup2Mount& o : out) {
      if (o.device != m.device) continue;
      seen = true;
      if (m.root.size() < o.root.size()) o = m;
    }
    if (!seen) out.push_back(m);
  }
  return out;
}

bool read_mountinfo(std::string* out) { return read_small_file("/proc/self/mountinfo", out); }

SysError locate_cgroup2_in(const std::string& mountinfo, const std::string& self_cgroup, CgroupLocation* out) {
  std::string own;
  bool found_own = false;
  for (const std::string& line : split(self_cgroup, '\n')) {
    if (line.compare(0, 3, "0::") == 0) {
      own = line.substr(3);
      found_own = true;
      break;
    }
  }
  if (!found_own) return SysError::of(ENOENT, "cgroup2", "/proc/self/cgroup");
  std::vector<Cgroup2Mount> mounts = cgroup2_mounts(mountinfo);
  for (const Cgroup2Mount& m : mounts) {
    // A bind mount of a sub-tree shows only what lies below its root: the
    // harness's cgroup must be in what this mount shows.
    if (!contains(m.root, own)) continue;
    std::string rel = m.root == "/" ? own : own.substr(m.root.size());
    if (rel.empty()) rel = "/";
    out->mount = m.mount;
    out->own = own;
    out->own_path = rel == "/" ? m.mount : (m.mount == "/" ? rel : m.mount + rel);
    return SysError::none();
  }
  return SysError::of(ENOENT, "cgroup2", mounts.empty() ? "/proc/self/mountinfo" : "no cgroup2 mount shows " + own);
}

SysError locate_cgroup2(CgroupLocation* out) {
  std::string mountinfo, self;
  if (!read_mountinfo(&mountinfo)) return SysError::from_errno("open", "/proc/self/mountinfo");
  if (!read_small_file("/proc/self/cgroup", &self)) return SysError::from_errno("open", "/proc/self/cgroup");
  return locate_cgroup2_in(mountinfo, self, out);
}

bool cgroup_kill_disabled_for_test() {
  static const bool off = [] {
    const char* v = getenv("PROCTREE_TEST_NO_CGROUP_KILL");
    return v != nullptr && strcmp(v, "1") == 0;
  }();
  return off;
}

SysError CgroupDir::create(const std::string& path, bool allow_existing, CgroupDir* out) {
  if (mkdir(path.c_str(), 0755) != 0 && !(allow_existing && errno == EEXIST)) {
    return SysError::from_errno("mkdir", path);
  }
  return open_existing(path, out);
}

SysError CgroupDir::open_existing(const std::string& path, CgroupDir* out) {
  CgroupDir d;
  d.path_ = path;
  d.dir_.reset(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.dir_) return SysError::from_errno("open", path);
  *out = std::move(d);
  return SysError::none();
}

Fd CgroupDir::open_file(const char* name) const {
  // By path when the directory is not open: a leaf whose descriptors were
  // closed after the clone is not held open again for a read.
  if (dir_) return Fd(openat(dir_.get(), name, O_RDONLY | O_CLOEXEC));
  return Fd(open((path_ + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
}

SysError CgroupDir::read_kept(Fd* kept, const char* name, char* buf, size_t cap, size_t* n) const {
  if (!*kept) {
    *kept = open_file(name);
    if (!*kept) return SysError::from_errno("open", path_ + "/" + name);
  }
  // One read from the start: a seq_file fills it with whole records, and
  // these files fit.
  ssize_t got;
  do {
    got = pread(kept->get(), buf, cap, 0);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return SysError::from_errno("read", path_ + "/" + name);
  *n = static_cast<size_t>(got);
  return SysError::none();
}

SysError CgroupDir::read_events(CgroupEvents* out) const {
  char buf[256];
  size_t n = 0;
  if (SysError e = read_kept(&events_, "cgroup.events", buf, sizeof buf - 1, &n)) return e;
  buf[n] = '\0';
  const char* p = strstr(buf, "populated ");
  out->populated = p && p[10] == '1';
  const char* f = strstr(buf, "frozen ");
  out->frozen = f && f[7] == '1';
  return SysError::none();
}

SysError cgroup_id_of(const std::string& path, unsigned long long* id) {
  // The kernfs node id is the file handle name_to_handle_at gives (as ss
  // uses it), which is the inode number on a 64-bit kernel; the inode
  // number is the fallback.
  struct {
    file_handle fh;
    uint64_t id;
  } h{};
  h.fh.handle_bytes = sizeof h.id;
  int mount_id;
  if (name_to_handle_at(AT_FDCWD, path.c_str(), &h.fh, &mount_id, 0) == 0 && h.fh.handle_bytes == sizeof h.id) {
    memcpy(id, h.fh.f_handle, sizeof h.id);
    return SysError::none();
  }
  struct statx st;
  if (statx(AT_FDCWD, path.c_str(), 0, STATX_INO, &st) != 0 || !(st.stx_mask & STATX_INO)) {
    return SysError::from_errno("statx", path);
  }
  *id = static_cast<unsigned long long>(st.stx_ino);
  return SysError::none();
}

SysError CgroupDir::read_procs(std::vector<pid_t>* out) const {
  out->clear();
  return walk_tree(
      dir(), path_, [out](int fd, const std::string& path) { return append_procs(fd, path, out); },
      [](int, const std::string&) {});
}

SysError CgroupDir::write_file(const char* name, const char* value) const {
  Fd fd(openat(dir(), name, O_WRONLY | O_CLOEXEC));
  if (!fd) return SysError::from_errno("open", path_ + "/" + name);
  size_t len = strlen(value);
  ssize_t n;
  do {
    n = write(fd.get(), value, len);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return SysError::from_errno("write", path_ + "/" + name);
  return SysError::none();
}

SysError CgroupDir::read_file(const char* name, std::string* out) const {
  Fd fd = open_file(name);
  if (!fd) return SysError::from_errno("open", path_ + "/" + name);
  if (!read_all(fd.get(), out, true)) return SysError::from_errno("read", path_ + "/" + name);
  return SysError::none();
}

SysError CgroupDir::read_cpu_stat(std::string* out) const {
  char buf[4096];
  size_t n = 0;
  SysError e = read_kept(&stat_, "cpu.stat", buf, sizeof buf, &n);
  // Removed while we read: nothing more to say, as read_all().
  if (e && e.err != ENODEV) return e;
  out->assign(buf, e ? 0 : n);
  return SysError::none();
}

bool CgroupDir::has_file(const char* name) const { return faccessat(dir(), name, F_OK, 0) == 0; }

bool CgroupDir::nesting_unlimited() const {
  // Kept open as cgroup.events is: a kept leaf is checked at the end of
  // every call it holds (two preads, not two opens, reads and closes).
  for (Fd* kept : {&max_descendants_, &max_depth_}) {
    const char* name = kept == &max_depth_ ? "cgroup.max.depth" : "cgroup.max.descendants";
    char buf[16];
    size_t n = 0;
    if (read_kept(kept, name, buf, sizeof buf, &n) || n != 4 || memcmp(buf, "max\n", 4) != 0) return false;
  }
  return true;
}

int CgroupDir::dir() const {
  // Reopened on demand after close(): a call's leaf needs its descriptor for
  // the clone only, and then once more if a ladder or members() asks.
  if (!dir_ && !path_.empty()) dir_.reset(open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  return dir_.get();
}

bool CgroupDir::has_kill() const { return !cgroup_kill_disabled_for_test() && has_file("cgroup.kill"); }

SysError CgroupDir::kill_round(bool* one_shot) const {
  // A cgroup.kill that cannot be written (a read-only or odd cgroupfs)
  // still leaves the freeze + SIGKILL round.
  const bool killed = has_kill() && !write_file("cgroup.kill", "1");
  if (one_shot) *one_shot = killed;
  if (killed) return SysError::none();
  return sigkill_round();
}

SysError CgroupDir::sigkill_round() const {
  bool froze = !self_is_traced() && !write_file("cgroup.freeze", "1");
  std::vector<pid_t> pids;
  SysError e = read_procs(&pids);
  if (!e) {
    e = for_each_confirmed(
        pids,
        [this](std::vector<Held>* held) {
          std::vector<pid_t> listed;
          if (SysError re = read_procs(&listed)) return re;
          keep_listed(held, &listed);
          return SysError::none();
        },
        [](Held& h) { pidfd_signal(h.pidfd.get(), SIGKILL); });
  }
  if (froze) write_file("cgroup.freeze", "0");
  return e;
}

bool CgroupDir::remove_if_empty() {
  if (path_.empty()) return true;
  if (rmdir(path_.c_str()) != 0 && errno != ENOENT) return false;
  close();
  path_.clear();
  return true;
}

SysError CgroupDir::remove() {
  if (path_.empty()) return SysError::none();
  // The common case: a leaf with nothing below it. (Our own descriptors of
  // it do not keep a directory from being removed.)
  if (remove_if_empty()) return SysError::none();
  if (errno != EBUSY) return SysError::from_errno("rmdir", path_);
  // Nested cgroups made by the tool call: remove them deepest first.
  walk_tree(
      dir(), path_, [](int, const std::string&) { return SysError::none(); },
      [](int parent, const std::string& name) { unlinkat(parent, name.c_str(), AT_REMOVEDIR); });
  if (remove_if_empty()) return SysError::none();
  return SysError::from_errno("rmdir", path_);
}

void CgroupDir::close() {
  events_.reset();
  stat_.reset();
  max_descendants_.reset();
  max_depth_.reset();
  dir_.reset();
}

}  // namespace proctree
