#pragma once

namespace proctree {

// `proctree-helper init|seal|subreaper <control-fd> <tty> <n> <candidate>...
// -- <argv>...`. See shim.cc. `sealed` (seal): an init that seals its
// namespaces first (helper/seal.h).
int shim_main(bool as_init, bool sealed, int argc, char** argv);

}  // namespace proctree
