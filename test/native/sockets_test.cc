// sockets.cc: what a tree listens on, by cgroup (sock_diag's cgroup filter
// plus the members' fds for unix sockets and pids) and by /proc (the
// members' fds against /proc/<pid>/net/*). Real processes in a real cgroup
// leaf listen on loopback only; each reports what it bound, and both ways
// must find exactly that: with the right pids, nothing of this process's own
// and nothing of an unrelated process.
#include "kernel/sockets.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include <algorithm>
#include <functional>

#include "check.h"
#include "fixtures.h"

using proctree::CgroupDir;
using proctree::Listener;
using proctree::ListenerProtocol;
using proctree::SysError;

namespace {

// ---- what a member does (in a forked child: plain libc is fine) ----

std::string sock_address(int family, const sockaddr_storage& ss, int* port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (family == AF_INET) {
    const sockaddr_in* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    *port = ntohs(a->sin_port);
  } else {
    const sockaddr_in6* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    *port = ntohs(a->sin6_port);
  }
  return text;
}

// Binds (and for tcp listens) a loopback socket on an ephemeral port; the
// Listener it makes (pid: this process), or protocol-less on failure.
bool bind_inet(int family, int type, Listener* out, int* fd_out = nullptr) {
  int fd = socket(family, type, 0);
  if (fd < 0) return false;
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    sockaddr_in* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *a;
  } else {
    sockaddr_in6* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof *a;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) return false;
  if (type == SOCK_STREAM && listen(fd, 8) != 0) return false;
  len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  out->protocol = type == SOCK_STREAM ? ListenerProtocol::tcp : ListenerProtocol::udp;
  out->address = sock_address(family, ss, &out->port);
  out->pid = getpid();
  if (fd_out) *fd_out = fd;
  return true;
}

// A listening unix stream socket at a path, or abstract ("@name").
bool listen_unix(const std::string& name, Listener* out, int* fd_out = nullptr) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  socklen_t len;
  if (name[0] == '@') {
    memcpy(a.sun_path + 1, name.data() + 1, name.size() - 1);  // sun_path[0] stays NUL
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  } else {
    memcpy(a.sun_path, name.data(), name.size());
    len = sizeof a;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd, 8) != 0) return false;
  out->protocol = ListenerProtocol::unix_stream;
  out->address = name;
  out->port = 0;
  out->pid = getpid();
  if (fd_out) *fd_out = fd;
  return true;
}

std::string line_of(const Listener& l) {
  return std::string(proctree::listener_protocol_name(l.protocol)) + " " + l.address + " " + std::to_string(l.port) +
         " " + std::to_string(l.pid);
}

std::string text_of(std::vector<Listener> v) {
  proctree::normalize_listeners(&v);
  std::string s;
  for (const Listener& l : v) s += line_of(l) + "\n";
  return s;
}

bool parse_line(const std::string& line, Listener* out) {
  char proto[8], addr[256];
  int port, pid;
  if (sscanf(line.c_str(), "%7s %255s %d %d", proto, addr, &port, &pid) != 4) return false;
  std::string p = proto;
  out->protocol = p == "tcp" ? ListenerProtocol::tcp : p == "udp" ? ListenerProtocol::udp : ListenerProtocol::unix_stream;
  out->address = addr;
  out->port = port;
  out->pid = pid;
  return true;
}

void write_line(int fd, const std::string& s) {
  std::string l = s + "\n";
  if (write(fd, l.data(), l.size()) < 0) _exit(91);
}

bool join_cgroup(const std::string& path) {
  int fd = open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string me = std::to_string(getpid());
  bool ok = write(fd, me.data(), me.size()) == static_cast<ssize_t>(me.size());
  close(fd);
  return ok;
}

// What a member runs: it binds, writes one line per socket to the report
// pipe and "done", then waits to be killed (by the cgroup's cleanup).
using Body = std::function<void(int report)>;

[[noreturn]] void member_main(const std::string& cgroup, int report, const Body& body) {
  if (!cgroup.empty() && !join_cgroup(cgroup)) {
    write_line(report, "error join");
    _exit(90);
  }
  body(report);
  write_line(report, "done");
  for (;;) pause();
}

// Reads lines from the report pipe until `dones` "done" lines came (or 10 s
// passed); the Listeners reported. false on an error line or a timeout.
bool read_reports(int fd, int dones, std::vector<Listener>* out) {
  std::string buf;
  int seen = 0;
  for (int waited = 0; seen < dones && waited < 10000;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) {
      waited += 100;
      continue;
    }
    char chunk[4096];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (line == "done") {
        ++seen;
        continue;
      }
      Listener l;
      if (!parse_line(line, &l)) {
        std::printf("     member said: %s\n", line.c_str());
        return false;
      }
      out->push_back(l);
    }
  }
  return seen == dones;
}

// Forks a member (dies with this process, see fixtures::start_sleeper).
pid_t start_member(fixtures::Children* kids, const std::string& cgroup, int report, const Body& body) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    member_main(cgroup, report, body);
  }
  return kids->add(pid);
}

// The same endpoint: protocol, address and port. A port number alone is not
// enough: tcp and udp, and 127.0.0.1 and ::1, hand out ephemeral ports
// independently, so an outside tcp4 port may equal a member's udp or tcp6 one.
bool has_endpoint(const std::vector<Listener>& v, const Listener& x) {
  return std::any_of(v.begin(), v.end(), [&](const Listener& l) {
    return l.protocol == x.protocol && l.address == x.address && l.port == x.port;
  });
}

double ms_since(const timespec& t0, clockid_t clock = CLOCK_MONOTONIC) {
  timespec t1;
  clock_gettime(clock, &t1);
  return (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
}

std::string unique_tag() { return "proctree-sockets-" + std::to_string(getpid()) + "-" + std::to_string(time(nullptr)); }

}  // namespace

TEST(normalize_sorts_and_dedupes) {
  std::vector<Listener> v{{ListenerProtocol::unix_stream, "@x", 0, 5},
                          {ListenerProtocol::tcp, "::1", 80, 3},
                          {ListenerProtocol::tcp, "127.0.0.1", 80, 3},
                          {ListenerProtocol::tcp, "::1", 80, 3}};
  proctree::normalize_listeners(&v);
  CHECK_EQ(v.size(), size_t(3));
  CHECK_EQ(v[0].address, std::string("127.0.0.1"));
  CHECK_EQ(v[1].address, std::string("::1"));
  CHECK(v[2].protocol == ListenerProtocol::unix_stream);
}

TEST(cgroup_ids_are_the_directories_inodes) {
  CgroupDir dir;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&dir, &why);
  if (path.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  CHECK(mkdir((path + "/a").c_str(), 0755) == 0);
  CHECK(mkdir((path + "/a/b").c_str(), 0755) == 0);
  std::vector<unsigned long long> ids;
  CHECK_EQ(proctree::cgroup_ids_below(path, &ids).err, 0);
  CHECK_EQ(ids.size(), size_t(3));
  struct stat st;
  CHECK(stat(path.c_str(), &st) == 0);
  // On a 64-bit kernel the kernfs node id is the inode number.
  CHECK_EQ(ids[0], static_cast<unsigned long long>(st.st_ino));
}

TEST(probe_finds_the_filter_on_this_kernel) {
  bool works = false;
  SysError e = proctree::probe_cgroup_socket_filter(&works);
  if (e.err == ENOENT) SKIP("no cgroup2 here");
  CHECK_EQ(e.err, 0);
  std::printf("     cgroup socket filter: %s\n", works ? "works" : "unavailable");
  CHECK_EQ(proctree::cgroup_socket_filter_available(), works);
}

// The whole scenario: members of the leaf (one in a nested cgroup below it,
// one daemonized by setsid whose parent is gone) listen on every kind of
// socket; this process and an unrelated one listen too.
TEST(finds_every_listener_of_the_tree_and_nothing_else) {
  CgroupDir dir;
  std::string why;
  std::string leaf = fixtures::make_test_cgroup(&dir, &why);
  if (leaf.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children kids;
  // Nested cgroups, the listener in the last of several: every id of the
  // filter's OR chain is reached.
  CHECK(mkdir((leaf + "/a").c_str(), 0755) == 0);
  CHECK(mkdir((leaf + "/b").c_str(), 0755) == 0);
  CHECK(mkdir((leaf + "/b/c").c_str(), 0755) == 0);

  std::string tag = unique_tag();
  std::string tmp = "/tmp/" + tag;
  CHECK(mkdir(tmp.c_str(), 0700) == 0);
  struct TmpCleanup {
    std::string dir;
    ~TmpCleanup() {
      unlink((dir + "/server.sock").c_str());
      rmdir(dir.c_str());
    }
  } tmp_cleanup{tmp};

  int pipefd[2];
  CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
  proctree::Fd rd(pipefd[0]), wr(pipefd[1]);
  const int report = wr.get();

  // A: tcp4, tcp6, udp4; and sockets that listen on nothing: a connected
  // UDP socket and a TCP client connection (both must stay out).
  start_member(&kids, leaf, report, [&](int out) {
    Listener l;
    int tcp_fd = -1, udp_fd = -1;
    if (bind_inet(AF_INET, SOCK_STREAM, &l, &tcp_fd)) write_line(out, line_of(l));
    int tcp_port = l.port;
    if (bind_inet(AF_INET6, SOCK_STREAM, &l)) write_line(out, line_of(l));
    if (bind_inet(AF_INET, SOCK_DGRAM, &l, &udp_fd)) write_line(out, line_of(l));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(static_cast<uint16_t>(l.port));
    int connected = socket(AF_INET, SOCK_DGRAM, 0);
    if (connect(connected, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) write_line(out, "error udp connect");
    to.sin_port = htons(static_cast<uint16_t>(tcp_port));
    int client = socket(AF_INET, SOCK_STREAM, 0);
    if (tcp_fd >= 0 && connect(client, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      write_line(out, "error tcp connect");
    }
  });
  // B: udp6, a unix path, an abstract unix name.
  start_member(&kids, leaf, report, [&](int out) {
    Listener l;
    if (bind_inet(AF_INET6, SOCK_DGRAM, &l)) write_line(out, line_of(l));
    if (listen_unix(tmp + "/server.sock", &l)) write_line(out, line_of(l));
    if (listen_unix("@" + tag, &l)) write_line(out, line_of(l));
  });
  // C: moved itself into leaf/b/c (as a tool may) before listening.
  start_member(&kids, leaf + "/b/c", report, [&](int out) {
    Listener l;
    if (bind_inet(AF_INET, SOCK_STREAM, &l)) write_line(out, line_of(l));
  });
  // D: daemonizes: its child setsid()s and listens, D exits at once.
  pid_t d = start_member(&kids, leaf, report, [&](int out) {
    if (fork() == 0) {
      setsid();
      Listener l;
      if (bind_inet(AF_INET, SOCK_STREAM, &l)) write_line(out, line_of(l));
      write_line(out, "done");
      for (;;) pause();
    }
    _exit(0);
  });
  CHECK(d > 0);
  std::vector<Listener> expected;
  // A, B, C and D's grandchild say "done" (D itself exits first).
  CHECK(read_reports(rd.get(), 4, &expected));
  CHECK(kids.reap(d));
  // At the least tcp4, udp4, unix path, unix abstract, C's and the daemon's.
  CHECK(expected.size() >= 6);

  // Outside the tree: an unrelated process, and this process itself (made
  // after the members were forked, so none of them inherited it).
  std::vector<Listener> outside;
  proctree::Fd out_rd, out_wr;
  {
    int p2[2];
    CHECK(pipe2(p2, O_CLOEXEC) == 0);
    out_rd.reset(p2[0]);
    out_wr.reset(p2[1]);
  }
  start_member(&kids, "", out_wr.get(), [&](int out) {
    Listener l;
    if (bind_inet(AF_INET, SOCK_STREAM, &l)) write_line(out, line_of(l));
    if (listen_unix("@" + tag + "-unrelated", &l)) write_line(out, line_of(l));
  });
  CHECK(read_reports(out_rd.get(), 1, &outside));
  CHECK_EQ(outside.size(), size_t(2));
  Listener own;
  int own_fd = -1;
  CHECK(bind_inet(AF_INET, SOCK_STREAM, &own, &own_fd));
  proctree::Fd own_holder(own_fd);
  Listener own_unix;
  int own_unix_fd = -1;
  CHECK(listen_unix("@" + tag + "-own", &own_unix, &own_unix_fd));
  proctree::Fd own_unix_holder(own_unix_fd);

  std::vector<pid_t> members;
  CHECK_EQ(dir.read_procs(&members).err, 0);
  CHECK_EQ(members.size(), size_t(4));  // A, B, C, the daemon

  std::vector<Listener> by_proc;
  CHECK_EQ(proctree::listeners_of_pids(members, &by_proc).err, 0);
  std::printf("     expected:\n%s", text_of(expected).c_str());
  CHECK_EQ(text_of(by_proc), text_of(expected));

  if (!proctree::cgroup_socket_filter_available()) SKIP("no sock_diag cgroup filter here; /proc way checked");
  std::vector<Listener> by_cgroup;
  CHECK_EQ(proctree::listeners_in_cgroup(leaf, &by_cgroup).err, 0);
  CHECK_EQ(text_of(by_cgroup), text_of(expected));
  for (const Listener& l : outside) {
    CHECK(!has_endpoint(by_cgroup, l));
    CHECK(!has_endpoint(by_proc, l));
  }
  CHECK(!has_endpoint(by_cgroup, own));
  CHECK(!has_endpoint(by_proc, own));
  for (const Listener& l : by_cgroup) CHECK(l.address.find("-unrelated") == std::string::npos && l.address.find("-own") == std::string::npos);
}

// A socket made outside the tree and handed down to a member is not the
// call's by cgroup (the harness's own sockets never show), but /proc,
// which only sees fds, lists it: the two ways differ exactly there.
TEST(inherited_socket_is_not_the_trees_by_cgroup) {
  if (!proctree::cgroup_socket_filter_available()) SKIP("no sock_diag cgroup filter here");
  CgroupDir dir;
  std::string why;
  std::string leaf = fixtures::make_test_cgroup(&dir, &why);
  if (leaf.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children kids;
  Listener inherited;
  int fd = -1;
  CHECK(bind_inet(AF_INET, SOCK_STREAM, &inherited, &fd));
  proctree::Fd holder(fd);
  int pipefd[2];
  CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
  proctree::Fd rd(pipefd[0]), wr(pipefd[1]);
  pid_t m = start_member(&kids, leaf, wr.get(), [&](int) {});
  std::vector<Listener> none;
  CHECK(read_reports(rd.get(), 1, &none));
  std::vector<Listener> by_cgroup, by_proc;
  CHECK_EQ(proctree::listeners_in_cgroup(leaf, &by_cgroup).err, 0);
  CHECK(by_cgroup.empty());
  CHECK_EQ(proctree::listeners_of_pids({m}, &by_proc).err, 0);
  CHECK_EQ(by_proc.size(), size_t(1));
  CHECK_EQ(by_proc[0].port, inherited.port);
  CHECK_EQ(by_proc[0].pid, m);
}

// Several members holding one socket (a server that forks its workers):
// one entry, the lowest pid. Two SO_REUSEPORT sockets on one port: two.
TEST(shared_socket_is_listed_once_with_the_lowest_pid) {
  CgroupDir dir;
  std::string why;
  std::string leaf = fixtures::make_test_cgroup(&dir, &why);
  if (leaf.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children kids;
  int pipefd[2];
  CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
  proctree::Fd rd(pipefd[0]), wr(pipefd[1]);
  start_member(&kids, leaf, wr.get(), [&](int out) {
    Listener l;
    if (!bind_inet(AF_INET, SOCK_STREAM, &l)) write_line(out, "error bind");
    write_line(out, line_of(l));
    for (int i = 0; i < 2; ++i) {
      if (fork() == 0) {
        write_line(out, "done");
        for (;;) pause();
      }
    }
  });
  std::vector<Listener> reported;
  CHECK(read_reports(rd.get(), 3, &reported));
  CHECK_EQ(reported.size(), size_t(1));
  std::vector<pid_t> members;
  CHECK_EQ(dir.read_procs(&members).err, 0);
  CHECK_EQ(members.size(), size_t(3));
  pid_t lowest = *std::min_element(members.begin(), members.end());
  std::vector<Listener> by_proc;
  CHECK_EQ(proctree::listeners_of_pids(members, &by_proc).err, 0);
  CHECK_EQ(by_proc.size(), size_t(1));
  CHECK_EQ(by_proc[0].pid, lowest);
  if (!proctree::cgroup_socket_filter_available()) SKIP("no sock_diag cgroup filter here; /proc way checked");
  std::vector<Listener> by_cgroup;
  CHECK_EQ(proctree::listeners_in_cgroup(leaf, &by_cgroup).err, 0);
  CHECK_EQ(text_of(by_cgroup), text_of(by_proc));
}

// A member in a network namespace of its own (as a sandboxed tool may
// be): sock_diag here cannot see its sockets, its /proc/<pid>/net can, and
// both ways read them there (which is also the /proc tables' parser at
// work: tcp, tcp6, udp, udp6, unix).
TEST(member_in_its_own_network_namespace) {
  CgroupDir dir;
  std::string why;
  std::string leaf = fixtures::make_test_cgroup(&dir, &why);
  if (leaf.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children kids;
  std::string tag = unique_tag() + "-netns";
  std::string tmp = "/tmp/" + tag;
  CHECK(mkdir(tmp.c_str(), 0700) == 0);
  struct TmpCleanup {
    std::string dir;
    ~TmpCleanup() {
      unlink((dir + "/ns.sock").c_str());
      rmdir(dir.c_str());
    }
  } tmp_cleanup{tmp};
  int pipefd[2];
  CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
  proctree::Fd rd(pipefd[0]), wr(pipefd[1]);
  start_member(&kids, leaf, wr.get(), [&](int out) {
    if (unshare(CLONE_NEWNET) != 0) {
      write_line(out, "skip unshare");
      return;
    }
    // A new namespace's loopback is down: bring it up for 127.0.0.1 and ::1.
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    ifreq ifr{};
    strcpy(ifr.ifr_name, "lo");
    ifr.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) write_line(out, "error lo up");
    close(s);
    Listener l;
    if (bind_inet(AF_INET, SOCK_STREAM, &l)) write_line(out, line_of(l));
    if (bind_inet(AF_INET6, SOCK_STREAM, &l)) write_line(out, line_of(l));
    if (bind_inet(AF_INET, SOCK_DGRAM, &l)) write_line(out, line_of(l));
    if (bind_inet(AF_INET6, SOCK_DGRAM, &l)) write_line(out, line_of(l));
    if (listen_unix(tmp + "/ns.sock", &l)) write_line(out, line_of(l));
    if (listen_unix("@" + tag, &l)) write_line(out, line_of(l));
  });
  std::vector<Listener> expected;
  bool ok = read_reports(rd.get(), 1, &expected);
  if (!ok && expected.empty()) SKIP("cannot make a network namespace here");
  CHECK(ok);
  CHECK(expected.size() >= 4);  // tcp4, udp4 and both unix at the least
  std::vector<pid_t> members;
  CHECK_EQ(dir.read_procs(&members).err, 0);
  std::vector<Listener> by_proc;
  CHECK_EQ(proctree::listeners_of_pids(members, &by_proc).err, 0);
  std::printf("     expected:\n%s", text_of(expected).c_str());
  CHECK_EQ(text_of(by_proc), text_of(expected));
  if (!proctree::cgroup_socket_filter_available()) SKIP("no sock_diag cgroup filter here; /proc way checked");
  std::vector<Listener> by_cgroup;
  CHECK_EQ(proctree::listeners_in_cgroup(leaf, &by_cgroup).err, 0);
  CHECK_EQ(text_of(by_cgroup), text_of(expected));
}

// Not a timed assertion: prints what both ways cost for a tree of 100
// processes, 10 of them listening.
TEST(cost_for_100_processes_with_10_listeners) {
  CgroupDir dir;
  std::string why;
  std::string leaf = fixtures::make_test_cgroup(&dir, &why);
  if (leaf.empty()) SKIP(why);
  fixtures::CgroupGuard guard(&dir);
  fixtures::Children kids;
  int pipefd[2];
  CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
  proctree::Fd rd(pipefd[0]), wr(pipefd[1]);
  for (int i = 0; i < 100; ++i) {
    bool listens = i % 10 == 0;
    CHECK(start_member(&kids, leaf, wr.get(), [&](int out) {
      Listener l;
      if (listens && bind_inet(AF_INET, SOCK_STREAM, &l)) write_line(out, line_of(l));
    }) > 0);
  }
  std::vector<Listener> expected;
  CHECK(read_reports(rd.get(), 100, &expected));
  CHECK_EQ(expected.size(), size_t(10));
  std::vector<pid_t> members;
  CHECK_EQ(dir.read_procs(&members).err, 0);
  CHECK_EQ(members.size(), size_t(100));

  // Wall time (what the caller waits, inflated on a loaded machine) and
  // this thread's CPU time (the work itself).
  const int rounds = 20;
  std::vector<double> proc_ms, proc_cpu, cgroup_ms, cgroup_cpu;
  bool filter = proctree::cgroup_socket_filter_available();
  for (int r = 0; r < rounds; ++r) {
    std::vector<Listener> got;
    timespec t0, c0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    CHECK_EQ(proctree::listeners_of_pids(members, &got).err, 0);
    proc_cpu.push_back(ms_since(c0, CLOCK_THREAD_CPUTIME_ID));
    proc_ms.push_back(ms_since(t0));
    CHECK_EQ(text_of(got), text_of(expected));
    if (!filter) continue;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    CHECK_EQ(proctree::listeners_in_cgroup(leaf, &got).err, 0);
    cgroup_cpu.push_back(ms_since(c0, CLOCK_THREAD_CPUTIME_ID));
    cgroup_ms.push_back(ms_since(t0));
    CHECK_EQ(text_of(got), text_of(expected));
  }
  for (auto* v : {&proc_ms, &proc_cpu, &cgroup_ms, &cgroup_cpu}) std::sort(v->begin(), v->end());
  std::printf("     100 processes, 10 listeners, %d rounds, medians: listeners_of_pids %.2f ms wall, %.2f ms cpu", rounds,
              proc_ms[rounds / 2], proc_cpu[rounds / 2]);
  if (filter) {
    std::printf("; listeners_in_cgroup %.2f ms wall, %.2f ms cpu", cgroup_ms[rounds / 2], cgroup_cpu[rounds / 2]);
  }
  std::printf("\n");
}

CHECK_MAIN()
