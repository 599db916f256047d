#include "kernel/systemd_probe.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "kernel/fd.h"

namespace proctree {
namespace {

std::string env_value(const std::vector<std::string>& env, const char* name) {
  size_t n = strlen(name);
  for (const std::string& e : env) {
    if (e.size() > n && e.compare(0, n, name) == 0 && e[n] == '=') return e.substr(n + 1);
  }
  return {};
}

// The path of the first unix:path= address in a D-Bus address list.
std::string bus_socket_path(const std::string& address) {
  size_t start = 0;
  while (start < address.size()) {
    size_t end = address.find(';', start);
    std::string one = address.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (one.compare(0, 5, "unix:") == 0) {
      size_t p = one.find("path=");
      if (p != std::string::npos) {
        std::string path = one.substr(p + 5);
        return path.substr(0, path.find(','));
      }
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return {};
}

// 0 when a process of our uid listens on the unix socket at path, else errno.
int connect_own_uid(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return ENAMETOOLONG;
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return errno;
  int r;
  do {
    r = connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } while (r < 0 && errno == EINTR);
  if (r != 0) return errno;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return errno;
  // The user bus is dbus-daemon (or dbus-broker) running as us; the private
  // socket is the manager itself. Anyone else's socket is not our manager.
  return cred.uid == geteuid() ? 0 : EPERM;
}

}  // namespace

std::string find_in_path(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : std::string();
  std::string path = env_value(env, "PATH");
  if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  for (;;) {
    size_t end = path.find(':', start);
    std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && dir[0] == '/') {
      std::string candidate = dir + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    if (end == std::string::npos) return {};
    start = end + 1;
  }
}

UserManagerProbe probe_user_manager(const std::vector<std::string>& env) {
  UserManagerProbe p;
  p.systemd_run = find_in_path("systemd-run", env);
  if (p.systemd_run.empty()) {
    p.err = ENOENT;
    p.syscall = "execve";
    p.detail = "systemd-run is not on PATH";
    return p;
  }
  std::string runtime = env_value(env, "XDG_RUNTIME_DIR");
  std::string bus = bus_socket_path(env_value(env, "DBUS_SESSION_BUS_ADDRESS"));
  if (runtime.empty() && bus.empty()) {
    // systemctl --user and systemd-run --user need one of them; without
    // both there is no session of a user manager here (a service, su, cron).
    p.err = ENOENT;
    p.syscall = "getenv";
    p.detail = "no user manager: neither XDG_RUNTIME_DIR nor DBUS_SESSION_BUS_ADDRESS is set";
    return p;
  }
  std::vector<std::string> sockets;
  if (!runtime.empty()) sockets.push_back(runtime + "/systemd/private");
  if (!bus.empty()) {
    sockets.push_back(bus);
  } else if (!runtime.empty()) {
    sockets.push_back(runtime + "/bus");
  }
  int first_err = 0;
  std::string tried;
  for (const std::string& s : sockets) {
    int e = connect_own_uid(s);
    if (e == 0) {
      p.ok = true;
      p.socket = s;
      p.detail = s;
      return p;
    }
    if (!first_err) first_err = e;
    tried += (tried.empty() ? "" : ", ") + s;
  }
  p.err = first_err;
  p.syscall = "connect";
  p.detail = "no user manager answers at " + tried;
  return p;
}

}  // namespace proctree
