// clone3() that starts the child on its own stack and runs fn(arg) there.
// glibc does not export its clone3 wrapper, and a plain syscall(2) cannot
// be used with a new stack: the child would return into the caller's frame.
#pragma once

#include <cstddef>

extern "C" long proctree_clone3(void* cl_args, size_t size, int (*fn)(void*), void* arg);
