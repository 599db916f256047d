#include "loop/errno_name.h"

#include <uv.h>

namespace proctree {

const char* errno_name(int err) { return uv_err_name(-err); }

}  // namespace proctree
