#include "kernel/broker_protocol.h"

#include <errno.h>
#include <sys/socket.h>

#include <cstring>

namespace proctree::broker {
namespace {

// resize + memcpy rather than insert: GCC 12 warns (falsely) about
// vector<char>::insert of a range into a freshly reserved buffer.
void put_bytes(std::vector<char>* out, const void* p, size_t n) {
  size_t at = out->size();
  out->resize(at + n);
  if (n) memcpy(out->data() + at, p, n);
}

void put_string(std::vector<char>* out, const std::string& s) { put_bytes(out, s.c_str(), s.size() + 1); }

// Reads NUL-terminated strings from [p, end); false when one is unterminated.
class StringReader {
 public:
  StringReader(const char* p, const char* end) : p_(p), end_(end) {}
  bool next(std::string* out) {
    const void* nul = memchr(p_, '\0', static_cast<size_t>(end_ - p_));
    if (!nul) return false;
    const char* z = static_cast<const char*>(nul);
    out->assign(p_, z);
    p_ = z + 1;
    return true;
  }
  bool next_n(uint32_t n, std::vector<std::string>* out) {
    out->clear();
    for (uint32_t i = 0; i < n; ++i) {
      std::string s;
      if (!next(&s)) return false;
      out->push_back(std::move(s));
    }
    return true;
  }
  bool at_end() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

Header header(uint32_t kind, uint64_t id, int32_t a, int32_t b, uint32_t flags) {
  Header h{};
  h.magic = kMagic;
  h.kind = kind;
  h.id = id;
  h.a = a;
  h.b = b;
  h.flags = flags;
  return h;
}

void put_header(std::vector<char>* out, const Header& h) { put_bytes(out, &h, sizeof h); }

}  // namespace

SysError encode_spawn(const SpawnMessage& m, std::vector<char>* out) {
  size_t size = sizeof(Header) + m.leaf.size() + m.cwd.size() + 2;
  for (const auto* list : {&m.candidates, &m.argv, &m.envp}) {
    for (const std::string& s : *list) size += s.size() + 1;
  }
  if (size > kMaxMessage) return SysError::of(E2BIG, "broker");
  Header h = header(kSpawn, m.id, 0, 0, m.flags);
  h.counts[0] = static_cast<uint32_t>(m.candidates.size());
  h.counts[1] = static_cast<uint32_t>(m.argv.size());
  h.counts[2] = static_cast<uint32_t>(m.envp.size());
  out->clear();
  out->reserve(size);
  put_header(out, h);
  put_string(out, m.leaf);
  put_string(out, m.cwd);
  for (const auto* list : {&m.candidates, &m.argv, &m.envp}) {
    for (const std::string& s : *list) put_string(out, s);
  }
  return SysError::none();
}

SysError decode_spawn(const char* data, size_t size, SpawnMessage* out) {
  if (size < sizeof(Header)) return SysError::of(EPROTO, "broker");
  Header h;
  memcpy(&h, data, sizeof h);
  if (h.magic != kMagic || h.kind != kSpawn) return SysError::of(EPROTO, "broker");
  StringReader r(data + sizeof h, data + size);
  out->id = h.id;
  out->flags = h.flags;
  if (!r.next(&out->leaf) || !r.next(&out->cwd) || !r.next_n(h.counts[0], &out->candidates) ||
      !r.next_n(h.counts[1], &out->argv) || !r.next_n(h.counts[2], &out->envp) || !r.at_end()) {
    return SysError::of(EPROTO, "broker");
  }
  if (out->candidates.empty() || out->argv.empty()) return SysError::of(EPROTO, "broker");
  return SysError::none();
}

std::vector<char> encode_reply(uint32_t kind, uint64_t id, int32_t a, int32_t b, uint32_t flags,
                               const std::string& s1, const std::string& s2) {
  std::vector<char> out;
  out.reserve(sizeof(Header) + s1.size() + s2.size() + 2);
  put_header(&out, header(kind, id, a, b, flags));
  put_string(&out, s1);
  put_string(&out, s2);
  return out;
}

SysError decode_reply(const char* data, size_t size, Reply* out) {
  if (size < sizeof(Header)) return SysError::of(EPROTO, "broker");
  memcpy(&out->header, data, sizeof(Header));
  if (out->header.magic != kMagic) return SysError::of(EPROTO, "broker");
  StringReader r(data + sizeof(Header), data + size);
  if (!r.next(&out->s1) || !r.next(&out->s2)) return SysError::of(EPROTO, "broker");
  return SysError::none();
}

bool valid_leaf(const std::string& leaf) {
  if (leaf.empty() || leaf.size() > 1024) return false;
  size_t start = 0;
  bool first = true;
  for (;;) {
    size_t end = leaf.find('/', start);
    std::string part = leaf.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty() || part == "." || part == ".." || part.compare(0, 7, "cgroup.") == 0) return false;
    if (first && part == "broker") return false;
    for (char c : part) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                c == '_' || c == '-' || c == '@' || c == ':';
      if (!ok) return false;
    }
    if (end == std::string::npos) return true;
    start = end + 1;
    first = false;
  }
}

ssize_t receive_packet(int sock, char* buf, size_t size, std::vector<Fd>* fds, bool* truncated) {
  iovec iov{buf, size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  for (cmsghdr* c = n > 0 ? CMSG_FIRSTHDR(&msg) : nullptr; c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds->emplace_back(fd);
    }
  }
  if (truncated) *truncated = n > 0 && (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  return n;
}

}  // namespace proctree::broker
