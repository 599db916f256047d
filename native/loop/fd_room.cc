#include "loop/fd_room.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>

#include "kernel/fd_table.h"
#include "kernel/stdio_fds.h"
#include "loop/thread.h"

namespace proctree {
namespace {

// The table is known to hold descriptors below this (0 until first grown).
std::atomic<int> g_room{0};
std::atomic<bool> g_growing{false};

int g_target = 0;  // written before the thread starts, read by it

void* grow(void* arg) {
  name_this_thread("proctree-fds");
  const int target = g_target;
  const int room = grow_fd_table(static_cast<int>(reinterpret_cast<intptr_t>(arg)), target);
  // Short of the target (RLIMIT_NOFILE ends the table there, or we are out
  // of descriptors): never tried again, rather than on every call.
  g_room.store(room == target ? target : INT_MAX, std::memory_order_relaxed);
  g_growing.store(false, std::memory_order_release);
  return nullptr;
}

}  // namespace

void keep_fd_room(int fd) {
  if (fd < 0) return;
  const int room = g_room.load(std::memory_order_relaxed);
  if (room > 0 && fd < room - kFdRoomAhead) return;
  bool idle = false;
  if (!g_growing.compare_exchange_strong(idle, true, std::memory_order_acquire)) return;
  const int past = std::min(fd, INT_MAX / 4) + kFdRoomAhead;
  const int target = std::max(room > 0 ? 2 * std::max(room, past) : kFdRoomFirst, past);
  // What is duplicated: the process's /dev/null of ours, open for good (no
  // descriptor of the harness's, whose POSIX locks a close would drop, and
  // none opened for this, which a harness counting its descriptors would
  // see for the growth's few milliseconds).
  const int null_fd = dev_null_fd();
  if (null_fd < 0) {
    g_growing.store(false, std::memory_order_release);
    return;
  }
  g_target = target;
  pthread_t thread;
  // A small stack: the thread makes a few system calls.
  if (start_thread(grow, reinterpret_cast<void*>(static_cast<intptr_t>(null_fd)), &thread, 64 * 1024)) {
    g_growing.store(false, std::memory_order_release);
    return;
  }
  detach_thread(thread);
}

}  // namespace proctree
