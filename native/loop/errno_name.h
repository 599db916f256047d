// The name Node gives an errno ("ENOENT"), for the `code` of the errors the
// binding builds: our own table of Linux's errnos, spelled as Node's.
#pragma once

namespace proctree {

// err: a positive errno. An unknown one: "Unknown system error -<err>" (a
// buffer of this thread's, valid until the next such call).
const char* errno_name(int err);

}  // namespace proctree
