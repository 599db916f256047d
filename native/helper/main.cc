// proctree-helper: the small executable that ships next to the addon. Its
// one job today is the guardian (see guardian.h).
#include <cstdio>
#include <cstring>

#include "../guardian.h"

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "guardian") == 0) {
    return proctree::guardian_main(argv[2], argv[3]);
  }
  fprintf(stderr, "usage: proctree-helper guardian <cgroup-dir> <subtree-prefix>\n");
  return 2;
}
