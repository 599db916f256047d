// The /proc side of kernel/sockets, for its own use: the tables of
// /proc/<pid>/net read for the sockets some processes hold (by inode), the
// inodes a process holds (/proc/<pid>/fd), and the small helpers both the
// /proc and the sock_diag ways share. No napi, no threads.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernel/sockets.h"

namespace proctree {
namespace socket_tables {

constexpr int kTcpListen = 10;  // TCP_LISTEN
constexpr int kTcpClose = 7;    // TCP_CLOSE: an unconnected UDP socket

// A socket the kernel listed, before we know who holds it.
struct Found {
  ListenerProtocol protocol;
  std::string address;
  int port;
  unsigned long long inode;
};

// A small file (a /proc table) whole; false when it cannot be read.
bool read_small_file(const std::string& path, std::string* out);
// An address as inet_ntop writes it; empty on failure.
std::string inet_text(int family, const void* addr);
// The inode number of path (or of fd with an empty path); 0 on failure.
unsigned long long inode_of(int dirfd, const char* path);
// The network namespace a /proc/<pid> (or /proc/thread-self) sees; 0 when gone.
unsigned long long net_ns_of(const std::string& proc_dir);
// The tables of the network namespace that /proc/<pid> sees, restricted to
// the given inodes; unix_too: also net/unix. false when pid is gone.
bool read_proc_net(const std::string& proc_dir, bool inet_too, bool unix_too,
                   const std::unordered_map<unsigned long long, pid_t>& wanted, std::vector<Found>* out);

// What the members hold: every socket inode with the lowest pid holding
// it, and the members that hold any, grouped by network namespace (only
// those pay for the readlink of /proc/<pid>/ns/net: most of a tree holds none).
struct Holdings {
  std::unordered_map<unsigned long long, pid_t> holders;
  std::map<unsigned long long, std::vector<pid_t>> by_net_ns;
};
void scan_members(std::vector<pid_t> pids, Holdings* out);
// Answers the members of one network namespace from its /proc/<pid>/net
// (tried through each member in turn, should the first one have gone).
void proc_net_listeners(const std::vector<pid_t>& members,
                        const std::unordered_map<unsigned long long, pid_t>& holders, std::vector<Found>* out);

}  // namespace socket_tables
}  // namespace proctree
