// The /proc side of kernel/sockets (see socket_tables.h).
#include "kernel/socket_tables.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernel/fd.h"

namespace proctree {
namespace socket_tables {

namespace {

constexpr unsigned kSoAcceptCon = 0x10000;  // __SO_ACCEPTCON in /proc/net/unix's Flags

// linux_dirent64, which glibc declares only from 2.30 (getdents64 too).
struct Dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

// The socket inodes pid holds open, each mapped to the lowest pid holding
// it (callers go through pids in ascending order and keep the first). Raw
// getdents64 on one descriptor: opendir's fstat and fcntls would be a third
// of the system calls of a tree with few fds per process. true when pid
// holds at least one socket.
bool collect_socket_inodes(pid_t pid, std::unordered_map<unsigned long long, pid_t>* holders) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  Fd dfd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) return false;  // gone, or not ours to read
  alignas(8) char buf[8192];
  char link[64];
  bool any = false;
  for (;;) {
    long n = syscall(SYS_getdents64, dfd.get(), buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const Dirent64* e = reinterpret_cast<const Dirent64*>(buf + off);
      off += e->d_reclen;
      if (e->d_name[0] == '.') continue;
      ssize_t len = readlinkat(dfd.get(), e->d_name, link, sizeof link - 1);
      if (len <= 8) continue;
      link[len] = '\0';
      if (strncmp(link, "socket:[", 8) != 0) continue;
      holders->emplace(strtoull(link + 8, nullptr, 10), pid);  // keeps an earlier (lower) pid
      any = true;
    }
  }
  return any;
}

// "0100007F:1F90" (the kernel's raw __be32 words in hex, port in host order).
bool parse_inet_hex(const char* p, int family, std::string* addr, int* port) {
  const size_t words = family == AF_INET ? 1 : 4;
  uint32_t raw[4] = {0, 0, 0, 0};
  char word[9] = {0};
  for (size_t i = 0; i < words; ++i) {
    memcpy(word, p + i * 8, 8);
    char* end;
    raw[i] = static_cast<uint32_t>(strtoul(word, &end, 16));
    if (end != word + 8) return false;
  }
  p += words * 8;
  if (*p != ':') return false;
  *port = static_cast<int>(strtol(p + 1, nullptr, 16));
  *addr = inet_text(family, raw);
  return !addr->empty();
}

// /proc/<pid>/net/{tcp,tcp6,udp,udp6}: the listening (tcp) or unconnected
// bound (udp) sockets whose inode is in `wanted`.
void parse_inet_table(const std::string& text, int family, ListenerProtocol proto,
                      const std::unordered_map<unsigned long long, pid_t>& wanted, std::vector<Found>* out) {
  const int state_wanted = proto == ListenerProtocol::tcp ? kTcpListen : kTcpClose;
  size_t pos = text.find('\n');  // the header
  while (pos != std::string::npos && pos + 1 < text.size()) {
    size_t start = pos + 1;
    pos = text.find('\n', start);
    std::string line = text.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
    char local[64], rem[64];
    unsigned state;
    unsigned long long inode;
    if (sscanf(line.c_str(), " %*s %63s %63s %x %*s %*s %*s %*u %*u %llu", local, rem, &state, &inode) != 4) continue;
    if (static_cast<int>(state) != state_wanted || wanted.find(inode) == wanted.end()) continue;
    Found f{proto, {}, 0, inode};
    if (!parse_inet_hex(local, family, &f.address, &f.port) || f.port == 0) continue;
    out->push_back(std::move(f));
  }
}

// /proc/<pid>/net/unix: "Num RefCount Protocol Flags Type St Inode Path".
void parse_unix_table(const std::string& text, const std::unordered_map<unsigned long long, pid_t>& wanted,
                      std::vector<Found>* out) {
  size_t pos = text.find('\n');
  while (pos != std::string::npos && pos + 1 < text.size()) {
    size_t start = pos + 1;
    pos = text.find('\n', start);
    std::string line = text.substr(start, pos == std::string::npos ? std::string::npos : pos - start);
    unsigned flags, type, st;
    unsigned long long inode;
    int path_at = -1;
    if (sscanf(line.c_str(), "%*s %*x %*x %x %x %x %llu%n", &flags, &type, &st, &inode, &path_at) != 4) continue;
    if (!(flags & kSoAcceptCon) || type != SOCK_STREAM || wanted.find(inode) == wanted.end()) continue;
    std::string path = path_at >= 0 && static_cast<size_t>(path_at) < line.size() ? line.substr(path_at + 1) : "";
    out->push_back(Found{ListenerProtocol::unix_stream, path, 0, inode});
  }
}

}  // namespace

bool read_small_file(const std::string& path, std::string* out) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  out->clear();
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out->append(buf, static_cast<size_t>(n));
  }
}

std::string inet_text(int family, const void* addr) {
  char text[INET6_ADDRSTRLEN] = "";
  if (!inet_ntop(family, addr, text, sizeof text)) return {};
  return text;
}

// The inode number of path (or of fd with an empty path); 0 on failure.
// statx, not stat: glibc before 2.33 has no stat symbol to link against.
unsigned long long inode_of(int dirfd, const char* path) {
  struct statx st;
  int flags = path[0] == '\0' ? AT_EMPTY_PATH : 0;
  if (statx(dirfd, path, flags, STATX_INO, &st) != 0 || !(st.stx_mask & STATX_INO)) return 0;
  return static_cast<unsigned long long>(st.stx_ino);
}

// The network namespace of a /proc/<pid>, from its ns/net link
// ("net:[4026531992]"), which every kernel the /proc way serves has (statx
// needs 4.11); 0 when gone.
unsigned long long net_ns_of(const std::string& proc_dir) {
  char link[64];
  ssize_t n = readlink((proc_dir + "/ns/net").c_str(), link, sizeof link - 1);
  if (n <= 5) return 0;
  link[n] = '\0';
  return strncmp(link, "net:[", 5) == 0 ? strtoull(link + 5, nullptr, 10) : 0;
}

// The tables of the network namespace that /proc/<pid> sees, restricted to
// the given inodes; unix_too: also net/unix. false when pid is gone.
bool read_proc_net(const std::string& proc_dir, bool inet_too, bool unix_too,
                   const std::unordered_map<unsigned long long, pid_t>& wanted, std::vector<Found>* out) {
  struct Table {
    const char* name;
    int family;
    ListenerProtocol proto;
  };
  static const Table tables[] = {{"tcp", AF_INET, ListenerProtocol::tcp},
                                 {"tcp6", AF_INET6, ListenerProtocol::tcp},
                                 {"udp", AF_INET, ListenerProtocol::udp},
                                 {"udp6", AF_INET6, ListenerProtocol::udp}};
  std::string text;
  bool any = false;
  if (inet_too) {
    for (const Table& t : tables) {
      // No tcp6 on a kernel without IPv6: nothing to find there.
      if (!read_small_file(proc_dir + "/net/" + t.name, &text)) continue;
      any = true;
      parse_inet_table(text, t.family, t.proto, wanted, out);
    }
  }
  if (unix_too && read_small_file(proc_dir + "/net/unix", &text)) {
    any = true;
    parse_unix_table(text, wanted, out);
  }
  return any;
}


void scan_members(std::vector<pid_t> pids, Holdings* out) {
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  for (pid_t pid : pids) {
    if (!collect_socket_inodes(pid, &out->holders)) continue;
    unsigned long long ns = net_ns_of("/proc/" + std::to_string(pid));
    if (ns != 0) out->by_net_ns[ns].push_back(pid);
  }
}

// Answers the members of one network namespace from its /proc/<pid>/net
// (tried through each member in turn, should the first one have gone).
void proc_net_listeners(const std::vector<pid_t>& members,
                        const std::unordered_map<unsigned long long, pid_t>& holders, std::vector<Found>* out) {
  for (pid_t pid : members) {
    if (read_proc_net("/proc/" + std::to_string(pid), true, true, holders, out)) return;
  }
}

}  // namespace socket_tables
}  // namespace proctree
