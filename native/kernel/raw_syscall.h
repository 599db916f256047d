// System calls without libc, for the child side of a CLONE_VM clone. That
// child shares the harness's memory and TLS, so it must not touch errno,
// malloc or any lock: these return -errno in the result instead.
#pragma once

#include <fcntl.h>
#include <sys/syscall.h>

namespace proctree::raw {

#if defined(__x86_64__)
__attribute__((always_inline)) inline long syscall6(long n, long a, long b, long c, long d, long e, long f) {
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
__attribute__((always_inline)) inline long syscall6(long n, long a, long b, long c, long d, long e, long f) {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  register long x5 __asm__("x5") = f;
  __asm__ volatile("svc 0"
                   : "+r"(x0)
                   : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                   : "memory");
  return x0;
}
#else
#error "proctree supports x86_64 and aarch64 only"
#endif

__attribute__((always_inline)) inline long syscall0(long n) { return syscall6(n, 0, 0, 0, 0, 0, 0); }
__attribute__((always_inline)) inline long syscall1(long n, long a) { return syscall6(n, a, 0, 0, 0, 0, 0); }
__attribute__((always_inline)) inline long syscall2(long n, long a, long b) { return syscall6(n, a, b, 0, 0, 0, 0); }
__attribute__((always_inline)) inline long syscall3(long n, long a, long b, long c) { return syscall6(n, a, b, c, 0, 0, 0); }
__attribute__((always_inline)) inline long syscall4(long n, long a, long b, long c, long d) {
  return syscall6(n, a, b, c, d, 0, 0);
}
__attribute__((always_inline)) inline long syscall5(long n, long a, long b, long c, long d, long e) {
  return syscall6(n, a, b, c, d, e, 0);
}

// open + write + close of a small file (/proc/self/uid_map); 0 or -errno.
__attribute__((always_inline)) inline long write_file(const char* path, const char* text, long len) {
  long fd = syscall4(__NR_openat, AT_FDCWD, reinterpret_cast<long>(path), O_WRONLY | O_CLOEXEC, 0);
  if (fd < 0) return fd;
  long r = syscall3(__NR_write, fd, reinterpret_cast<long>(text), len);
  syscall1(__NR_close, fd);
  return r < 0 ? r : 0;
}

}  // namespace proctree::raw
