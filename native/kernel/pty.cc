#include "kernel/pty.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

namespace proctree {

SysError open_pty(unsigned short cols, unsigned short rows, Fd* master, Fd* slave) {
  Fd m(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  if (!m) return SysError::from_errno("posix_openpt", "/dev/ptmx");
  if (grantpt(m.get()) != 0) return SysError::from_errno("grantpt");
  if (unlockpt(m.get()) != 0) return SysError::from_errno("unlockpt");
  // TIOCGPTPEER (4.13) opens the slave through the master, immune to a
  // /dev/pts that is not the master's; ptsname otherwise.
  Fd s(ioctl(m.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!s) {
    char name[128];
    if (ptsname_r(m.get(), name, sizeof name) != 0) return SysError::from_errno("ptsname_r");
    s.reset(open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!s) return SysError::from_errno("open", name);
  }
  if (SysError e = resize_pty(m.get(), cols, rows)) return e;
  *master = std::move(m);
  *slave = std::move(s);
  return SysError::none();
}

SysError resize_pty(int master, unsigned short cols, unsigned short rows) {
  winsize ws{};
  ws.ws_col = cols;
  ws.ws_row = rows;
  if (ioctl(master, TIOCSWINSZ, &ws) != 0) return SysError::from_errno("ioctl");
  return SysError::none();
}

pid_t pty_foreground(int master) { return tcgetpgrp(master); }

}  // namespace proctree
