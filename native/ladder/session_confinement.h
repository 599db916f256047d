// The pgroup tier, the baseline when nothing stronger works: the command
// leads a new session, and the tree is whatever lives in that session. A
// descendant that calls setsid() is invisible to it: neither signalled nor
// reported, which is why its reports say verified 'none'. No event says "the
// session is empty": it is looked for every poll_ms.
//
// The session id is the command's pid. The call keeps the command a zombie
// (unreaped) until the session is empty, so no other process can be given
// that number, and so none can ever lead a session of that id and be taken
// for a member.
#pragma once

#include <sys/types.h>

#include "ladder/confinement.h"

namespace proctree {

class SessionConfinement : public Confinement {
 public:
  explicit SessionConfinement(pid_t leader) : leader_(leader) {}

  Tier tier() const override { return Tier::kPgroup; }
  const char* verified() const override { return "none"; }
  SysError members(std::vector<pid_t>* out) const override;
  SysError confirm(std::vector<Held>* held) const override;
  bool empty() const override;
  int poll_ms() const override { return 50; }

 private:
  pid_t leader_;
};

}  // namespace proctree
