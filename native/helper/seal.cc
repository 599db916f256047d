// The sealed call's namespaces, made good inside the shim (see seal.h). The
// model is bubblewrap's: a user namespace owns new PID, mount and cgroup
// namespaces; the mounts that hide the host are made by the shim, which
// keeps its capabilities (it is the namespace's init); the command holds
// none, so it cannot unmount them, and the mounts it inherits from the
// host's namespace are locked to it anyway (a nested user namespace gets
// them as one unit it cannot take apart).
#include "helper/seal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace proctree::seal {
namespace {

constexpr const char* kCgroupRoot = "/sys/fs/cgroup";
// More cgroup mounts than any host has: the walk of mountinfo is bounded.
constexpr size_t kMaxCgroupMounts = 256;

int fail(const char** step, const char* name) {
  *step = name;
  return errno != 0 ? errno : EIO;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool under_cgroup_root(const std::string& mp) {
  const size_t n = strlen(kCgroupRoot);
  return mp.compare(0, n, kCgroupRoot) == 0 && (mp.size() == n || mp[n] == '/');
}

// The mount points of every cgroup or cgroup2 mount this namespace can still
// reach: those below /sys/fs/cgroup are covered already.
int other_cgroup_mounts(std::vector<std::string>* out) {
  FILE* f = fopen("/proc/self/mountinfo", "re");
  if (!f) return errno;
  char* line = nullptr;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0 && out->size() < kMaxCgroupMounts) {
    // id parent maj:min root mount-point options... - fstype source super-options
    std::vector<std::string> fields;
    for (char* tok = strtok(line, " \n"); tok; tok = strtok(nullptr, " \n")) fields.emplace_back(tok);
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (fields.size() < 5 || dash + 1 >= fields.size()) continue;
    const std::string& type = fields[dash + 1];
    if (type != "cgroup" && type != "cgroup2") continue;
    std::string mp = unescape(fields[4]);
    if (!under_cgroup_root(mp)) out->push_back(mp);
  }
  free(line);
  fclose(f);
  return 0;
}

// /dev/null over a service manager's socket: connect() then finds no socket
// (ECONNREFUSED), and without capabilities the command cannot unmount it.
int hide_socket(const std::string& path, const char** step) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  if (mount("/dev/null", path.c_str(), nullptr, MS_BIND, nullptr) != 0) return fail(step, "mount");
  return 0;
}

}  // namespace

int prepare(int* host_proc, const char** step) {
  errno = 0;
  *host_proc = -1;
  // Rooted where the shim is now: the call's leaf.
  if (unshare(CLONE_NEWCGROUP) != 0) return fail(step, "unshare");
  // Nothing mounted here may reach the harness's namespace, nor the reverse.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail(step, "mount");
  *host_proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (*host_proc < 0) return fail(step, "open");
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) return fail(step, "mount");
  if (mount("cgroup2", kCgroupRoot, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    return fail(step, "mount");
  }
  std::vector<std::string> others;
  if (int err = other_cgroup_mounts(&others)) {
    *step = "open";
    return err;
  }
  for (const std::string& mp : others) {
    if (mount("tmpfs", mp.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555") != 0) {
      return fail(step, "mount");
    }
  }
  std::vector<std::string> runtime_dirs = {"/run/user/" + std::to_string(getuid())};
  if (const char* xdg = getenv("XDG_RUNTIME_DIR"); xdg && *xdg == '/' && runtime_dirs[0] != xdg) {
    runtime_dirs.emplace_back(xdg);
  }
  for (const std::string& dir : runtime_dirs) {
    if (int err = hide_socket(dir + "/systemd/private", step)) return err;
    if (int err = hide_socket(dir + "/bus", step)) return err;
  }
  // The system manager's private socket: a root command would ask it for a
  // scope of its own (systemd-run --scope) as the user manager's is asked.
  if (int err = hide_socket("/run/systemd/private", step)) return err;
  return 0;
}

int drop_capabilities() {
  // While CAP_SETPCAP is still held: exec as uid 0 (a root harness maps 0
  // to 0) must not give the full set back, and nothing may re-enable that.
  const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                             SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                             SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) return errno;
  // The bounding set: every capability this kernel knows (EINVAL past the last).
  for (int cap = 0; cap < 64; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;
      return errno;
    }
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return errno;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0) return errno;
  return 0;
}

}  // namespace proctree::seal
