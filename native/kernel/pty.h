// A pseudo-terminal for one call: the master stays with the harness, the
// slave becomes the command's stdin, stdout, stderr and controlling terminal.
#pragma once

#include <sys/types.h>

#include <string>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

// Opens a master (O_NONBLOCK, close-on-exec, no controlling terminal of ours)
// and its slave (close-on-exec), with the window size set.
SysError open_pty(unsigned short cols, unsigned short rows, Fd* master, Fd* slave);

// TIOCSWINSZ on the master: the kernel sends SIGWINCH to the terminal's
// foreground process group.
SysError resize_pty(int master, unsigned short cols, unsigned short rows);

// The terminal's foreground process group (tcgetpgrp on the master), or -1.
pid_t pty_foreground(int master);

}  // namespace proctree
