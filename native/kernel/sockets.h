// What a call listens on: the listening TCP sockets (IPv4 and IPv6), the
// unconnected bound UDP sockets and the listening unix stream sockets of
// every process of its tree, and nothing outside it.
//
// Two ways to the same answer:
//   * the cgroup tier asks the kernel by cgroup (sock_diag with an
//     INET_DIAG_BC_CGROUP_COND filter, Linux 5.8): a socket belongs to the
//     cgroup its creator was in when it made it, so the query names the leaf
//     and every cgroup below it (a member that moved itself into a nested
//     cgroup makes its sockets there). Unix sockets carry no cgroup: they are
//     matched by inode against the members' /proc/<pid>/fd links;
//   * the other tiers (and kernels without the filter) read the members'
//     /proc/<pid>/fd links and match their socket inodes against
//     /proc/<pid>/net/{tcp,tcp6,udp,udp6,unix}, one read per network namespace.
// Neither blocks on anything but /proc and one netlink socket: a few
// milliseconds for a tree of a hundred processes, but still not for the JS
// thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "kernel/sys_error.h"

namespace proctree {

enum class ListenerProtocol { tcp, udp, unix_stream };

// One socket something listens on. Ordered and compared on every field, so
// a sorted, deduplicated vector is the canonical answer.
struct Listener {
  ListenerProtocol protocol = ListenerProtocol::tcp;
  // tcp/udp: the local address as Node's server.address() prints it
  // ("127.0.0.1", "::", "::1", "::ffff:127.0.0.1"); unix: the path, or "@"
  // and the name for an abstract socket (a NUL inside the name shows as '@',
  // as in /proc/net/unix and ss).
  std::string address;
  int port = 0;    // 0 for unix
  pid_t pid = -1;  // the member holding it (the lowest pid of several); -1 unknown

  bool operator==(const Listener& o) const {
    return protocol == o.protocol && address == o.address && port == o.port && pid == o.pid;
  }
  bool operator<(const Listener& o) const;
};

const char* listener_protocol_name(ListenerProtocol p);  // "tcp", "udp", "unix"

// The cgroup tier: sockets created in the cgroup at `cgroup_dir_path` (an
// absolute cgroup2 directory) or any cgroup below it, via sock_diag, and the
// unix listeners its members hold; each with the member that holds it (pid
// -1 when no member holds it any more, e.g. handed away by SCM_RIGHTS).
// sock_diag sees this process's network namespace: a member in another one
// is answered from its own /proc/<pid>/net instead (as listeners_of_pids).
// ENOSYS-like failures of the filter come back as the sock_diag error
// (EINVAL on a kernel without INET_DIAG_BC_CGROUP_COND): check
// cgroup_socket_filter_available() first. *out is sorted and deduplicated.
SysError listeners_in_cgroup(const std::string& cgroup_dir_path, std::vector<Listener>* out);

// The listening TCP and bound UDP sockets made in the cgroups with these
// ids (cgroup_ids_below), whoever holds them and even once those cgroups
// are removed (a socket keeps its cgroup): what a tree that is gone left
// to a process outside it. No pids (no member holds them). Needs the filter.
SysError listeners_of_cgroup_ids(const std::vector<unsigned long long>& ids, std::vector<Listener>* out);

// The /proc way, for any tier: the sockets whose inodes the given processes
// hold open, each with the lowest of those pids holding it. A pid that is
// gone (or whose fds we may not read) is skipped. *out sorted and deduplicated.
SysError listeners_of_pids(const std::vector<pid_t>& pids, std::vector<Listener>* out);

// Whether the sock_diag cgroup filter works here: the kernel accepts the
// bytecode, and a listening socket this process makes is found under this
// process's own cgroup. Probed once (thread-safe) and remembered; false on
// cgroup v1-only hosts and on kernels before 5.8.
bool cgroup_socket_filter_available();
// The probe itself, uncached (for tests).
SysError probe_cgroup_socket_filter(bool* works);

// The cgroup ids (cgroup2 kernfs node ids, what sock_diag filters on) of the
// cgroup at `path` and of every cgroup below it, the leaf first.
SysError cgroup_ids_below(const std::string& path, std::vector<unsigned long long>* out);

// Sorts, then drops exact duplicates.
void normalize_listeners(std::vector<Listener>* v);

}  // namespace proctree
