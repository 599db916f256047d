#pragma once

namespace proctree {

// `proctree-helper init|subreaper <control-fd> <tty> <n> <candidate>... --
// <argv>...`. See shim.cc.
int shim_main(bool as_init, int argc, char** argv);

}  // namespace proctree
