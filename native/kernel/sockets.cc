#include "kernel/sockets.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>

#include "kernel/cgroup.h"
#include "kernel/fd.h"
#include "kernel/socket_tables.h"

namespace proctree {

namespace {

using socket_tables::Found;
using socket_tables::Holdings;
using socket_tables::inet_text;
using socket_tables::inode_of;
using socket_tables::kTcpClose;
using socket_tables::kTcpListen;
using socket_tables::net_ns_of;
using socket_tables::proc_net_listeners;
using socket_tables::read_proc_net;
using socket_tables::read_small_file;
using socket_tables::scan_members;

// Named here, not taken from <linux/inet_diag.h>: the prebuilds are made
// against headers older than Linux 5.8, which lack it; the value is ABI.
constexpr unsigned char kBcCgroupCond = 13;  // INET_DIAG_BC_CGROUP_COND
constexpr unsigned char kBcJmp = 1;          // INET_DIAG_BC_JMP
constexpr unsigned short kReqBytecode = 1;   // INET_DIAG_REQ_BYTECODE
// The bytecode's jump offsets are 16 bits: this many cgroups per query.
constexpr size_t kIdsPerQuery = 1024;

// sun_path bytes as /proc/net/unix and ss show them: an abstract name as
// '@' plus the name with each NUL as '@'; a path without its trailing NULs.
std::string unix_text(const char* name, size_t len) {
  if (len == 0) return {};
  if (name[0] == '\0') {
    std::string s(name, len);
    std::replace(s.begin(), s.end(), '\0', '@');
    return s;
  }
  while (len > 0 && name[len - 1] == '\0') --len;
  return std::string(name, len);
}

// ---- sock_diag -----------------------------------------------------------

Fd diag_socket() { return Fd(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)); }

SysError diag_send(int nl, const void* req, size_t len) {
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  for (;;) {
    ssize_t n = sendto(nl, req, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel);
    if (n >= 0) return SysError::none();
    if (errno != EINTR) return SysError::from_errno("sendto", "NETLINK_SOCK_DIAG");
  }
}

// Reads a dump's replies until NLMSG_DONE, handing each message to fn.
template <typename Fn>
SysError diag_receive(int nl, unsigned seq, Fn fn) {
  std::vector<uint64_t> storage(32768 / sizeof(uint64_t));  // aligned for nlmsghdr
  char* buf = reinterpret_cast<char*>(storage.data());
  for (;;) {
    ssize_t n = recv(nl, buf, storage.size() * sizeof(uint64_t), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return SysError::from_errno("recv", "NETLINK_SOCK_DIAG");
    if (n == 0) return SysError::of(EIO, "recv", "NETLINK_SOCK_DIAG");
    int left = static_cast<int>(n);
    for (nlmsghdr* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != seq) continue;
      if (h->nlmsg_type == NLMSG_DONE) return SysError::none();
      if (h->nlmsg_type == NLMSG_ERROR) {
        const nlmsgerr* err = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
        return SysError::of(err->error < 0 ? -err->error : EIO, "sock_diag");
      }
      fn(h);
    }
  }
}

// One bytecode program accepting a socket whose cgroup is any of ids:
// cond(id0) JMP cond(id1) JMP ... cond(idN). A cond's "yes" goes on to the
// JMP after it, which always takes its "no" to the end (accept); a cond's
// "no" skips that JMP to the next cond; the last cond's "no" lands 4 bytes
// past the end (reject). The kernel's audit follows the "yes" chain, so
// every op must lie on it: hence the JMPs (ss builds its OR the same way).
std::vector<char> cgroup_bytecode(const unsigned long long* ids, size_t n) {
  if (n == 0) return {};
  const size_t cond = sizeof(inet_diag_bc_op) + sizeof(uint64_t);
  const size_t jmp = sizeof(inet_diag_bc_op);
  std::vector<char> bc(n * cond + (n - 1) * jmp);
  char* p = bc.data();
  for (size_t i = 0; i < n; ++i) {
    inet_diag_bc_op op{kBcCgroupCond, static_cast<unsigned char>(cond), static_cast<unsigned short>(cond + jmp)};
    memcpy(p, &op, sizeof op);
    uint64_t id = ids[i];
    memcpy(p + sizeof op, &id, sizeof id);
    p += cond;
    if (i + 1 < n) {
      size_t rest = (n - 1 - i) * cond + (n - 2 - i) * jmp;
      inet_diag_bc_op j{kBcJmp, static_cast<unsigned char>(jmp), static_cast<unsigned short>(rest + jmp)};
      memcpy(p, &j, sizeof j);
      p += jmp;
    }
  }
  return bc;
}

// Sockets of one family and protocol in the given states whose cgroup is
// one of ids; with no ids, every one (of this network namespace).
SysError inet_query(int nl, int family, int protocol, unsigned states, const unsigned long long* ids, size_t n,
                    std::vector<Found>* out) {
  std::vector<char> bc = cgroup_bytecode(ids, n);
  struct Head {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
    rtattr attr;
  };
  std::vector<uint64_t> storage((NLMSG_ALIGN(sizeof(Head)) + RTA_ALIGN(bc.size()) + 7) / 8);
  char* msg = reinterpret_cast<char*>(storage.data());
  Head* head = reinterpret_cast<Head*>(msg);
  static unsigned seq_counter = 0;
  unsigned seq = __atomic_add_fetch(&seq_counter, 1, __ATOMIC_RELAXED);
  head->nlh.nlmsg_len = static_cast<uint32_t>(bc.empty() ? offsetof(Head, attr) : sizeof(Head) + bc.size());
  head->nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  head->nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  head->nlh.nlmsg_seq = seq;
  head->req.sdiag_family = static_cast<uint8_t>(family);
  head->req.sdiag_protocol = static_cast<uint8_t>(protocol);
  head->req.idiag_states = states;
  head->attr.rta_type = kReqBytecode;
  head->attr.rta_len = static_cast<unsigned short>(RTA_LENGTH(bc.size()));
  if (!bc.empty()) memcpy(msg + sizeof(Head), bc.data(), bc.size());
  if (SysError e = diag_send(nl, msg, head->nlh.nlmsg_len)) return e;
  const ListenerProtocol proto = protocol == IPPROTO_TCP ? ListenerProtocol::tcp : ListenerProtocol::udp;
  return diag_receive(nl, seq, [&](const nlmsghdr* h) {
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) return;
    const inet_diag_msg* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
    int port = ntohs(m->id.idiag_sport);
    if (port == 0) return;
    out->push_back(Found{proto, inet_text(m->idiag_family, m->id.idiag_src), port, m->idiag_inode});
  });
}

// The listening TCP and unconnected bound UDP sockets, IPv4 and IPv6, of
// this network namespace whose cgroup is one of ids (all of them: n == 0).
SysError inet_listeners(int nl, const unsigned long long* ids, size_t n, std::vector<Found>* out) {
  struct Query {
    int family, protocol;
    unsigned states;
  };
  const Query queries[] = {{AF_INET, IPPROTO_TCP, 1u << kTcpListen},
                           {AF_INET6, IPPROTO_TCP, 1u << kTcpListen},
                           {AF_INET, IPPROTO_UDP, 1u << kTcpClose},
                           {AF_INET6, IPPROTO_UDP, 1u << kTcpClose}};
  for (const Query& q : queries) {
    size_t i = 0;
    do {
      size_t chunk = std::min(kIdsPerQuery, n - i);
      SysError e = inet_query(nl, q.family, q.protocol, q.states, ids + i, chunk, out);
      // No IPv6 in this kernel: no IPv6 sockets either.
      if (e.err == EAFNOSUPPORT || (e.err == ENOENT && q.family == AF_INET6)) break;
      if (e) return e;
      i += chunk;
    } while (i < n);
  }
  return SysError::none();
}

// Every listening unix stream socket of this network namespace.
SysError unix_query(int nl, std::vector<Found>* out) {
  struct {
    nlmsghdr nlh;
    unix_diag_req req;
  } msg{};
  static unsigned seq_counter = 1u << 30;
  unsigned seq = __atomic_add_fetch(&seq_counter, 1, __ATOMIC_RELAXED);
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  msg.nlh.nlmsg_seq = seq;
  msg.req.sdiag_family = AF_UNIX;
  msg.req.udiag_states = 1u << kTcpListen;
  msg.req.udiag_show = UDIAG_SHOW_NAME;
  if (SysError e = diag_send(nl, &msg, sizeof msg)) return e;
  return diag_receive(nl, seq, [&](const nlmsghdr* h) {
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(unix_diag_msg))) return;
    const unix_diag_msg* m = static_cast<const unix_diag_msg*>(NLMSG_DATA(h));
    if (m->udiag_type != SOCK_STREAM) return;
    std::string name;
    int len = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(unix_diag_msg)));
    for (const rtattr* a = reinterpret_cast<const rtattr*>(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
      if (a->rta_type == UNIX_DIAG_NAME) {
        name = unix_text(static_cast<const char*>(RTA_DATA(a)), RTA_PAYLOAD(a));
      }
    }
    out->push_back(Found{ListenerProtocol::unix_stream, name, 0, m->udiag_ino});
  });
}

// Found -> Listener, with the pid holding each (or -1), sorted, deduplicated.
void attach_holders(const std::vector<Found>& found, const std::unordered_map<unsigned long long, pid_t>& holders,
                    std::vector<Listener>* out) {
  std::map<unsigned long long, const Found*> by_inode;  // one entry per socket
  for (const Found& f : found) by_inode.emplace(f.inode, &f);
  out->clear();
  for (const auto& kv : by_inode) {
    auto h = holders.find(kv.first);
    out->push_back(Listener{kv.second->protocol, kv.second->address, kv.second->port,
                            h == holders.end() ? -1 : h->second});
  }
  normalize_listeners(out);
}

// The cgroup at path and everything below: ids and members (appended).
SysError walk_cgroups(const std::string& path, std::vector<unsigned long long>* ids, std::vector<pid_t>* pids) {
  std::vector<std::string> todo{path};
  while (!todo.empty()) {
    std::string dir = std::move(todo.back());
    todo.pop_back();
    unsigned long long id;
    if (SysError e = cgroup_id_of(dir, &id)) {
      if (e.err == ENOENT && dir != path) continue;  // removed while we walked
      return e;
    }
    ids->push_back(id);
    if (pids) {
      std::string text;
      if (read_small_file(dir + "/cgroup.procs", &text)) {
        for (const char* p = text.c_str(); *p;) {
          char* end;
          long v = strtol(p, &end, 10);
          if (end == p) break;
          pids->push_back(static_cast<pid_t>(v));
          p = end;
          while (*p == '\n') ++p;
        }
      }
    }
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      todo.push_back(dir + "/" + e->d_name);
    }
    closedir(d);
  }
  return SysError::none();
}

}  // namespace

const char* listener_protocol_name(ListenerProtocol p) {
  switch (p) {
    case ListenerProtocol::tcp:
      return "tcp";
    case ListenerProtocol::udp:
      return "udp";
    case ListenerProtocol::unix_stream:
      return "unix";
  }
  return "?";
}

bool Listener::operator<(const Listener& o) const {
  if (protocol != o.protocol) return protocol < o.protocol;
  if (address != o.address) return address < o.address;
  if (port != o.port) return port < o.port;
  return pid < o.pid;
}

void normalize_listeners(std::vector<Listener>* v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

SysError cgroup_ids_below(const std::string& path, std::vector<unsigned long long>* out) {
  out->clear();
  return walk_cgroups(path, out, nullptr);
}

SysError listeners_of_pids(const std::vector<pid_t>& pids, std::vector<Listener>* out) {
  out->clear();
  Holdings held;
  scan_members(pids, &held);
  // Socket inodes are unique across namespaces (one sockfs): each
  // namespace's tables are matched against all of them.
  std::vector<Found> found;
  unsigned long long own_ns = net_ns_of("/proc/thread-self");
  for (const auto& group : held.by_net_ns) {
    // Our own namespace through sock_diag when it answers: /proc/net/tcp
    // walks the whole established hash (twice, with tcp6), a LISTEN-state
    // dump only the listening one.
    if (group.first == own_ns) {
      std::vector<Found> all;
      Fd nl = diag_socket();
      if (nl && !inet_listeners(nl.get(), nullptr, 0, &all) && !unix_query(nl.get(), &all)) {
        for (Found& f : all) {
          if (held.holders.count(f.inode)) found.push_back(std::move(f));
        }
        continue;
      }
    }
    proc_net_listeners(group.second, held.holders, &found);
  }
  attach_holders(found, held.holders, out);
  return SysError::none();
}

SysError listeners_in_cgroup(const std::string& cgroup_dir_path, std::vector<Listener>* out) {
  out->clear();
  std::vector<unsigned long long> ids;
  std::vector<pid_t> members;
  if (SysError e = walk_cgroups(cgroup_dir_path, &ids, &members)) return e;

  Fd nl = diag_socket();
  if (!nl) return SysError::from_errno("socket", "NETLINK_SOCK_DIAG");
  // Sockets made in the tree, whoever holds them now: in this network namespace.
  std::vector<Found> found;
  if (SysError e = inet_listeners(nl.get(), ids.data(), ids.size(), &found)) return e;

  Holdings held;
  scan_members(members, &held);
  unsigned long long own_ns = net_ns_of("/proc/thread-self");
  for (const auto& group : held.by_net_ns) {
    if (group.first == own_ns) continue;
    // Members in another network namespace: sock_diag here cannot see
    // their sockets, their own /proc/<pid>/net can.
    proc_net_listeners(group.second, held.holders, &found);
  }
  const auto& holders = held.holders;

  // Unix sockets carry no cgroup: the ones members hold, in our namespace.
  std::vector<Found> unix_found;
  if (SysError e = unix_query(nl.get(), &unix_found)) {
    if (e.err != ENOENT) return e;  // no unix_diag: read /proc instead
    read_proc_net("/proc/thread-self", false, true, holders, &found);
  }
  for (Found& f : unix_found) {
    if (holders.count(f.inode)) found.push_back(std::move(f));
  }
  attach_holders(found, holders, out);
  return SysError::none();
}

SysError listeners_of_cgroup_ids(const std::vector<unsigned long long>& ids, std::vector<Listener>* out) {
  out->clear();
  if (ids.empty()) return SysError::none();
  Fd nl = diag_socket();
  if (!nl) return SysError::from_errno("socket", "NETLINK_SOCK_DIAG");
  std::vector<Found> found;
  if (SysError e = inet_listeners(nl.get(), ids.data(), ids.size(), &found)) return e;
  attach_holders(found, {}, out);
  return SysError::none();
}

SysError probe_cgroup_socket_filter(bool* works) {
  *works = false;
  CgroupLocation loc;
  if (SysError e = locate_cgroup2(&loc)) return e;
  unsigned long long id;
  if (SysError e = cgroup_id_of(loc.own_path, &id)) return e;
  Fd nl = diag_socket();
  if (!nl) return SysError::from_errno("socket", "NETLINK_SOCK_DIAG");
  // A listener of our own, which must come back under our cgroup's id: a
  // kernel that accepted the bytecode but keeps no cgroup per socket would
  // answer nothing for every call.
  Fd probe(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in lo{};
  lo.sin_family = AF_INET;
  lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool listening = probe && bind(probe.get(), reinterpret_cast<sockaddr*>(&lo), sizeof lo) == 0 &&
                   listen(probe.get(), 1) == 0;
  unsigned long long probe_inode = listening ? inode_of(probe.get(), "") : 0;
  if (probe_inode == 0) listening = false;
  std::vector<Found> found;
  if (SysError e = inet_query(nl.get(), AF_INET, IPPROTO_TCP, 1u << kTcpListen, &id, 1, &found)) {
    return e.err == EINVAL ? SysError::none() : e;  // EINVAL: the bytecode is unknown here
  }
  // udp_diag may be a module that is not there: then the filter is no use.
  std::vector<Found> udp;
  if (SysError e = inet_query(nl.get(), AF_INET, IPPROTO_UDP, 1u << kTcpClose, &id, 1, &udp)) {
    return e.err == ENOENT || e.err == EINVAL ? SysError::none() : e;
  }
  if (!listening) {
    // No loopback in this namespace to listen on: the kernel took the
    // filter, which is all we can tell.
    *works = true;
    return SysError::none();
  }
  for (const Found& f : found) {
    if (f.inode == probe_inode) *works = true;
  }
  return SysError::none();
}

bool cgroup_socket_filter_available() {
  static const bool available = [] {
    bool works = false;
    return !probe_cgroup_socket_filter(&works) && works;
  }();
  return available;
}

}  // namespace proctree
