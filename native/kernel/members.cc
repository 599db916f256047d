#include "kernel/members.h"

#include <algorithm>
#include <cerrno>

#include "kernel/fd_table.h"
#include "kernel/pidfd.h"

namespace proctree {
namespace {

// Besides a batch's pidfds: what confirming it opens, and other threads' use.
constexpr size_t kFdSlack = 64;

}  // namespace

void keep_listed(std::vector<Held>* held, std::vector<pid_t>* listed) {
  std::sort(listed->begin(), listed->end());
  held->erase(std::remove_if(held->begin(), held->end(),
                             [&](const Held& h) { return !std::binary_search(listed->begin(), listed->end(), h.pid); }),
              held->end());
}

SysError for_each_confirmed(const std::vector<pid_t>& pids, const ConfirmMembers& confirm,
                            const std::function<void(Held&)>& fn, size_t batch, std::vector<Fd>* keep_last) {
  SysError first;
  size_t i = 0;
  std::vector<Held> held;
  std::vector<size_t> index;  // where each held pid is in `pids`
  while (i < pids.size()) {
    held.clear();
    index.clear();
    while (i < pids.size() && held.size() < std::max<size_t>(batch, 1)) {
      Fd fd = pidfd_open(pids[i]);
      if (!fd) {
        // Gone already (ESRCH): nothing to do. Out of descriptors: work
        // with what this batch holds, then try again with them closed.
        if ((errno == EMFILE || errno == ENFILE) && !held.empty()) break;
        if (errno != ESRCH && !first) first = SysError::from_errno("pidfd_open");
        ++i;
        continue;
      }
      // A large batch: room for all of it in one growth of the table, not
      // one grace period per doubling (kernel/fd_table.h).
      if (held.empty() && batch > kHeldBatch) {
        const size_t want = std::min(batch, pids.size() - i) + kFdSlack;
        grow_fd_table(fd.get(), fd.get() + static_cast<int>(std::min<size_t>(want, 1 << 20)));
      }
      held.push_back(Held{pids[i], std::move(fd)});
      index.push_back(i);
      ++i;
    }
    if (held.empty()) continue;
    SysError e = confirm(&held);
    // Confirming needs descriptors too (cgroup.procs, a directory): with the
    // batch holding nearly all we may have, give half of it back and retry.
    while (e && (e.err == EMFILE || e.err == ENFILE) && held.size() > 1) {
      size_t keep = held.size() / 2;
      i = index[keep];
      held.resize(keep);
      index.resize(keep);
      e = confirm(&held);
    }
    if (e) {
      if (!first) first = e;
      continue;
    }
    for (Held& h : held) fn(h);
    if (keep_last && i >= pids.size()) {
      for (Held& h : held) {
        if (h.pidfd) keep_last->push_back(std::move(h.pidfd));
      }
    }
  }
  return first;
}

}  // namespace proctree
