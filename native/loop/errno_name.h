// The name Node gives an errno ("ENOENT"), for the `code` of the errors the
// binding builds: libuv's table, so our codes are exactly Node's.
#pragma once

namespace proctree {

// err: a positive errno.
const char* errno_name(int err);

}  // namespace proctree
