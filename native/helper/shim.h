#pragma once

namespace proctree {

// `proctree-helper init|subreaper <n> <candidate>... -- <argv>...`, with the
// control socket at fd 3. See shim.cc.
int shim_main(bool as_init, int argc, char** argv);

}  // namespace proctree
