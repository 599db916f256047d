// The socket between a harness and its broker (the systemd tier): one
// SOCK_SEQPACKET socketpair, the broker's end at fd 3 of `proctree-helper
// broker`, every message one packet (a Header, then a body of NUL-terminated
// strings), descriptors passed by SCM_RIGHTS.
//
// harness -> broker
//   kSpawn      id, flags = stdio mask (bit i: an fd for stdio slot i is
//               attached, in slot order; a slot without one gets /dev/null)
//               | kNewSession; counts = candidates, argv, env;
//               body: leaf, cwd, candidates..., argv..., env...;
//               fds: the stdio fds of the mask, in order.
//   EOF         the harness closed the socket or died: the broker kills every
//               leaf and exits.
// broker -> harness
//   kReady      once, first: a = the broker's pid, flags = kHasCgroupKill;
//               body: the scope (the broker's own cgroup's parent, absolute).
//   kSetupFailed instead of kReady: a = errno; body: syscall, path. The
//               broker exits after it.
//   kSpawned    id; a = the call's pid (broker's PID namespace); body: the
//               leaf's absolute path; fds: the call's pidfd.
//   kSpawnFailed id; a = errno; body: syscall, path. Nothing was left: the
//               leaf the broker made for it is removed again.
//   kExited     id; a = exit code or -1; b = terminating signal or 0. Always
//               after that id's kSpawned: the broker is the main process's
//               parent and reaps it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernel/fd.h"

#include "kernel/sys_error.h"

namespace proctree::broker {

constexpr uint32_t kMagic = 0x31425450;  // "PTB1"
constexpr int kSocketFd = 3;
// The largest packet either side sends or accepts. The harness raises its
// SO_SNDBUF to fit it; larger requests fail with E2BIG before they are sent.
constexpr size_t kMaxMessage = 200 * 1024;
constexpr int kMaxFds = 3;

enum Kind : uint32_t {
  kReady = 1,
  kSetupFailed = 2,
  kSpawned = 3,
  kSpawnFailed = 4,
  kExited = 5,
  kSpawn = 16,
};

enum Flags : uint32_t {
  kStdin = 1u << 0,
  kStdout = 1u << 1,
  kStderr = 1u << 2,
  kNewSession = 1u << 8,
  kControllingTty = 1u << 9,  // fd 0 is a terminal: make it the session's
  kHasCgroupKill = 1u << 16,  // kReady: the broker's cgroups have cgroup.kill
};

struct Header {
  uint32_t magic;
  uint32_t kind;
  uint64_t id;
  int32_t a;
  int32_t b;
  uint32_t flags;
  uint32_t counts[3];  // kSpawn: candidates, argv, env
};
static_assert(sizeof(Header) == 40, "the header is part of the protocol");

struct SpawnMessage {
  uint64_t id = 0;
  std::string leaf;  // relative to the scope; empty: the broker names it call-<n>
  std::string cwd;   // empty: the broker's (the user's home)
  std::vector<std::string> candidates;
  std::vector<std::string> argv;
  std::vector<std::string> envp;
  uint32_t flags = kNewSession;  // stdio mask | kNewSession
};

// Serializes m (header + body). E2BIG when it would exceed kMaxMessage.
SysError encode_spawn(const SpawnMessage& m, std::vector<char>* out);
// Parses a kSpawn packet; EPROTO when malformed.
SysError decode_spawn(const char* data, size_t size, SpawnMessage* out);

// A reply: header + up to two strings (path; or syscall and path).
std::vector<char> encode_reply(uint32_t kind, uint64_t id, int32_t a, int32_t b, uint32_t flags,
                               const std::string& s1, const std::string& s2 = {});
struct Reply {
  Header header{};
  std::string s1, s2;
};
SysError decode_reply(const char* data, size_t size, Reply* out);

// A leaf name the broker accepts: one or more '/'-separated components of
// [A-Za-z0-9._@:-], none "." or "..", none starting with "cgroup.", the
// first not "broker" (the broker's own leaf).
bool valid_leaf(const std::string& leaf);

// One packet from a SOCK_SEQPACKET socket, with the descriptors that came
// with it (close-on-exec), without blocking. Returns recvmsg's result (-1
// with errno set, 0 at EOF); *truncated when the packet or its descriptors
// did not fit.
ssize_t receive_packet(int sock, char* buf, size_t size, std::vector<Fd>* fds, bool* truncated);

}  // namespace proctree::broker
