// proctree-helper: the small executable that ships next to the addon: the
// guardian (see helper/guardian.h), the per-call shims of the pidns and
// subreaper tiers and of sealed calls (see helper/shim.cc), and the systemd tier's broker (see
// helper/broker.h).
#include <cstdio>
#include <cstring>

#include "helper/broker.h"
#include "helper/guardian.h"
#include "helper/shim.h"

// What `--version` answers: the addon runs it once to prove that the helper
// can run here at all (a helper for another libc or architecture cannot).
// The number is the version of the helper's command line and protocols.
#define PROCTREE_HELPER_VERSION "2"

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("proctree-helper %s\n", PROCTREE_HELPER_VERSION);
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "guardian") == 0) {
    return proctree::guardian_main(argv[2], argv[3]);
  }
  if (argc >= 2 && (strcmp(argv[1], "init") == 0 || strcmp(argv[1], "seal") == 0 ||
                    strcmp(argv[1], "subreaper") == 0)) {
    const bool sealed = strcmp(argv[1], "seal") == 0;
    return proctree::shim_main(sealed || strcmp(argv[1], "init") == 0, sealed, argc - 2, argv + 2);
  }
  if (argc >= 2 && strcmp(argv[1], "broker") == 0) {
    return proctree::broker_main(argc - 2, argv + 2);
  }
  fprintf(stderr,
          "usage: proctree-helper --version\n"
          "       proctree-helper guardian <cgroup-dir> <subtree-prefix>\n"
          "       proctree-helper init|seal|subreaper <control-fd> <tty> <n> <candidate>... -- <argv>...\n"
          "       proctree-helper broker <harness-pid> <harness-start-time>  (socket at fd 3)\n");
  return 2;
}
