#include "loop/errno_name.h"

#include <uv.h>

#include <cerrno>
#include <cstring>

namespace proctree {

const char* errno_name(int err) {
  const char* name = uv_err_name(-err);
  // libuv names the errors Node knows; a few that the kernel gives us it
  // does not (it then answers "Unknown system error").
  if (strncmp(name, "Unknown", 7) != 0) return name;
  switch (err) {
    case ECHILD: return "ECHILD";
    case ENOTSUP: return "ENOTSUP";
    case EDEADLK: return "EDEADLK";
    case ENOLINK: return "ENOLINK";
    case EOWNERDEAD: return "EOWNERDEAD";
    case ESTALE: return "ESTALE";
    case EDQUOT: return "EDQUOT";
    default: return name;
  }
}

}  // namespace proctree
