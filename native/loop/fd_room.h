// Keeps the process's descriptor table (kernel/fd_table.h) ahead of the
// descriptors the addon opens, growing it on a short-lived thread of its own
// so that no grace period of that growth is waited for on the JavaScript
// thread or in a ladder's pass. Process-wide: every Environment (main thread
// and workers) shares the one table.
#pragma once

namespace proctree {

// At least this much room from the first call on: a pass over a large tree
// holds up to 1024 pidfds (LadderLimits::kPassHeld) besides what the harness
// has open.
constexpr int kFdRoomFirst = 2048;
// Grown again, to twice as far, once a descriptor we were given comes within
// this many of the end.
constexpr int kFdRoomAhead = 512;

// `fd` is a descriptor just opened (any thread). Costs an atomic load while
// there is room; otherwise starts the growth, unless one is under way.
void keep_fd_room(int fd);

}  // namespace proctree
