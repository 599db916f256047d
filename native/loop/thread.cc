#include "loop/thread.h"

#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

// glibc 2.34 moved pthread_create and pthread_join into libc under a new
// symbol version; the old one is still there. Bound to it, the addon needs
// no glibc newer than Node's own official builds do (scripts/symbol-ceiling.js).
// Not under the sanitizers, which intercept the default version only.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#if defined(__x86_64__)
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_detach,pthread_detach@GLIBC_2.2.5");
__asm__(".symver pthread_attr_setstacksize,pthread_attr_setstacksize@GLIBC_2.2.5");
__asm__(".symver pthread_condattr_setclock,pthread_condattr_setclock@GLIBC_2.3.3");
#elif defined(__aarch64__)
__asm__(".symver pthread_create,pthread_create@GLIBC_2.17");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.17");
__asm__(".symver pthread_detach,pthread_detach@GLIBC_2.17");
__asm__(".symver pthread_attr_setstacksize,pthread_attr_setstacksize@GLIBC_2.17");
__asm__(".symver pthread_condattr_setclock,pthread_condattr_setclock@GLIBC_2.17");
#endif
#endif

namespace proctree {

SysError start_thread(void* (*fn)(void*), void* arg, pthread_t* out, size_t stack_size) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (stack_size > 0) pthread_attr_setstacksize(&attr, stack_size);
  sigset_t all, old;
  sigfillset(&all);
  // The new thread inherits this mask; ours is restored at once.
  sigprocmask(SIG_SETMASK, &all, &old);
  int r = pthread_create(out, &attr, fn, arg);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  if (r != 0) return SysError::of(r, "pthread_create");
  return SysError::none();
}

void join_thread(pthread_t thread) { pthread_join(thread, nullptr); }

void detach_thread(pthread_t thread) { pthread_detach(thread); }

void name_this_thread(const char* name) { prctl(PR_SET_NAME, name, 0, 0, 0); }

void init_monotonic_cond(pthread_cond_t* cv) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
}

}  // namespace proctree
