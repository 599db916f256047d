#include "kernel/proc_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_set>

#include "kernel/fd.h"
#include "kernel/procfs.h"

namespace proctree {
namespace {

// Appends the children of every thread of pid: a child belongs to the thread
// that forked it, so /proc/<pid>/children alone misses threads' children.
void append_children(pid_t pid, std::vector<pid_t>* out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", static_cast<int>(pid));
  DIR* d = opendir(path);
  if (!d) return;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char cpath[320];
    snprintf(cpath, sizeof cpath, "/proc/%d/task/%s/children", static_cast<int>(pid), e->d_name);
    Fd fd(open(cpath, O_RDONLY | O_CLOEXEC));
    if (!fd) continue;
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd.get(), buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    const char* p = text.c_str();
    while (*p) {
      char* end = nullptr;
      long v = strtol(p, &end, 10);
      if (end == p) break;
      out->push_back(static_cast<pid_t>(v));
      p = end;
      while (*p == ' ' || *p == '\n') ++p;
    }
  }
  closedir(d);
}

}  // namespace

std::vector<pid_t> live_descendants(pid_t root) {
  std::vector<pid_t> out;
  std::vector<pid_t> queue;
  std::unordered_set<pid_t> seen;
  append_children(root, &queue);
  // Breadth first; bounded by what /proc lists, each pid visited once.
  for (size_t i = 0; i < queue.size(); ++i) {
    pid_t pid = queue[i];
    if (!seen.insert(pid).second) continue;
    ProcessInfo info;
    if (!read_process_stat(pid, &info)) continue;
    if (info.state != 'Z' && info.state != 'X') out.push_back(pid);
    append_children(pid, &queue);
  }
  return out;
}

std::vector<pid_t> session_members(pid_t leader) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    ProcessInfo info;
    if (!read_process_stat(pid, &info)) continue;
    if (info.state == 'Z' || info.state == 'X') continue;
    if (info.sid == leader || info.pgid == leader) out.push_back(pid);
  }
  closedir(d);
  return out;
}

}  // namespace proctree
