// The addon's own threads (the reactor's waiter, the file writer, spawners): started
// with every signal blocked, so that a signal meant for the process (SIGINT,
// SIGCHLD) is never handled on a thread the runtime does not know.
#pragma once

#include <pthread.h>

#include "kernel/sys_error.h"

namespace proctree {

// stack_size 0: the default (8 MiB of address space).
SysError start_thread(void* (*fn)(void*), void* arg, pthread_t* out, size_t stack_size = 0);
void join_thread(pthread_t thread);
void detach_thread(pthread_t thread);
// Names the calling thread (15 characters at most): /proc/PID/task/TID/comm
// shows which of the addon's threads spends what.
void name_this_thread(const char* name);
// A condition whose timed waits count CLOCK_MONOTONIC (a deadline no clock
// change moves).
void init_monotonic_cond(pthread_cond_t* cv);

}  // namespace proctree
