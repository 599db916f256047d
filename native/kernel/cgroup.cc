#include "kernel/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

bool read_small_file(const char* path, std::string* out) {
  Fd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  out->clear();
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) return true;
    out->append(buf, static_cast<size_t>(n));
  }
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

bool parse_cgroup_v2_line(const std::string& text, std::string* out) {
  for (const std::string& line : split(text, '\n')) {
    if (line.compare(0, 3, "0::") == 0) {
      *out = line.substr(3);
      return true;
    }
  }
  return false;
}

}  // namespace

SysError locate_cgroup2(CgroupLocation* out) {
  std::string mountinfo;
  if (!read_small_file("/proc/self/mountinfo", &mountinfo)) {
    return SysError::from_errno("open", "/proc/self/mountinfo");
  }
  std::string mount, mount_root;
  for (const std::string& line : split(mountinfo, '\n')) {
    // id parent maj:min root mountpoint opts [optional...] - fstype source super
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::vector<std::string> tail = split(line.substr(dash + 3), ' ');
    if (tail.empty() || tail[0] != "cgroup2") continue;
    std::vector<std::string> head = split(line.substr(0, dash), ' ');
    if (head.size() < 5) continue;
    mount_root = unescape_mount_field(head[3]);
    mount = unescape_mount_field(head[4]);
    break;
  }
  if (mount.empty()) return SysError::of(ENOENT, "cgroup2", "/proc/self/mountinfo");

  std::string self;
  if (!read_small_file("/proc/self/cgroup", &self)) {
    return SysError::from_errno("open", "/proc/self/cgroup");
  }
  std::string own;
  if (!parse_cgroup_v2_line(self, &own)) return SysError::of(ENOENT, "cgroup2", "/proc/self/cgroup");
  // A bind mount of a sub-tree shows only what lies below its root.
  if (mount_root != "/") {
    if (own.compare(0, mount_root.size(), mount_root) != 0) {
      return SysError::of(ENOENT, "cgroup2", mount);
    }
    own = own.substr(mount_root.size());
    if (own.empty()) own = "/";
  }
  out->mount = mount;
  out->own = own;
  out->own_path = own == "/" ? mount : mount + own;
  return SysError::none();
}

bool read_pid_cgroup(pid_t pid, std::string* out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/cgroup", static_cast<int>(pid));
  std::string text;
  if (!read_small_file(path, &text)) return false;
  return parse_cgroup_v2_line(text, out);
}

SysError CgroupDir::create(const std::string& path, bool allow_existing, CgroupDir* out) {
  if (mkdir(path.c_str(), 0755) != 0 && !(allow_existing && errno == EEXIST)) {
    return SysError::from_errno("mkdir", path);
  }
  CgroupDir d;
  d.path_ = path;
  d.dir_.reset(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.dir_) return SysError::from_errno("open", path);
  *out = std::move(d);
  return SysError::none();
}

SysError CgroupDir::read_events(CgroupEvents* out) const {
  if (!events_) {
    int fd = openat(dir_.get(), "cgroup.events", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return SysError::from_errno("open", path_ + "/cgroup.events");
    events_.reset(fd);
  }
  char buf[256];
  ssize_t n;
  do {
    n = pread(events_.get(), buf, sizeof buf - 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return SysError::from_errno("read", path_ + "/cgroup.events");
  buf[n] = '\0';
  const char* p = strstr(buf, "populated ");
  out->populated = p && p[10] == '1';
  const char* f = strstr(buf, "frozen ");
  out->frozen = f && f[7] == '1';
  return SysError::none();
}

namespace {

SysError read_procs_at(int dir, const std::string& path, std::vector<pid_t>* out, int depth) {
  Fd fd(openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC));
  if (!fd) return SysError::from_errno("open", path + "/cgroup.procs");
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return SysError::from_errno("read", path + "/cgroup.procs");
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  const char* p = text.c_str();
  while (*p) {
    char* end;
    long v = strtol(p, &end, 10);
    if (end == p) break;
    out->push_back(static_cast<pid_t>(v));
    p = end;
    while (*p == '\n') ++p;
  }
  // A tool call may make cgroups of its own inside its leaf (a container
  // runtime, systemd-nspawn): their members are the call's members too.
  if (depth > 32) return SysError::none();
  int dup_fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dup_fd < 0) return SysError::none();
  DIR* d = fdopendir(dup_fd);
  if (!d) {
    ::close(dup_fd);
    return SysError::none();
  }
  while (dirent* e = readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    Fd sub(openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (sub) read_procs_at(sub.get(), path + "/" + e->d_name, out, depth + 1);
  }
  closedir(d);
  return SysError::none();
}

// rmdir below path, deepest first: nested cgroups made by the tool call.
void remove_children(const std::string& path, int depth) {
  if (depth > 32) return;
  DIR* d = opendir(path.c_str());
  if (!d) return;
  std::vector<std::string> subs;
  while (dirent* e = readdir(d)) {
    if (e->d_type == DT_DIR && e->d_name[0] != '.') subs.push_back(path + "/" + e->d_name);
  }
  closedir(d);
  for (const std::string& sub : subs) {
    remove_children(sub, depth + 1);
    rmdir(sub.c_str());
  }
}

}  // namespace

SysError CgroupDir::read_procs(std::vector<pid_t>* out) const {
  out->clear();
  return read_procs_at(dir_.get(), path_, out, 0);
}

SysError CgroupDir::write_file(const char* name, const char* value) const {
  Fd fd(openat(dir_.get(), name, O_WRONLY | O_CLOEXEC));
  if (!fd) return SysError::from_errno("open", path_ + "/" + name);
  size_t len = strlen(value);
  ssize_t n;
  do {
    n = write(fd.get(), value, len);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return SysError::from_errno("write", path_ + "/" + name);
  return SysError::none();
}

SysError CgroupDir::open_procs_for_write() {
  if (procs_) return SysError::none();
  procs_.reset(openat(dir_.get(), "cgroup.procs", O_WRONLY | O_CLOEXEC));
  if (!procs_) return SysError::from_errno("open", path_ + "/cgroup.procs");
  return SysError::none();
}

bool CgroupDir::has_file(const char* name) const {
  return faccessat(dir_.get(), name, F_OK, 0) == 0;
}

SysError CgroupDir::remove() {
  close();
  if (path_.empty()) return SysError::none();
  if (rmdir(path_.c_str()) != 0 && errno != ENOENT) {
    if (errno != EBUSY) return SysError::from_errno("rmdir", path_);
    remove_children(path_, 0);
    if (rmdir(path_.c_str()) != 0 && errno != ENOENT) return SysError::from_errno("rmdir", path_);
  }
  path_.clear();
  return SysError::none();
}

void CgroupDir::close() {
  events_.reset();
  procs_.reset();
  dir_.reset();
}

}  // namespace proctree
