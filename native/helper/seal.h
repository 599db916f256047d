// What `proctree-helper seal` adds to the pidns init (helper/shim.cc): the
// shim is born into the call's cgroup leaf in new user, PID and mount
// namespaces (loop/environment_seal.cc); these steps make the rest of the
// seal before the command is forked, and take the command's capabilities
// away before its exec.
#pragma once

namespace proctree::seal {

// In the shim, before the command is forked: a cgroup namespace rooted at
// the leaf (unshare: the clone's own CLONE_NEWCGROUP would root it where the
// harness is), every mount private, a fresh /proc of the new PID namespace,
// the namespace's own cgroup2 over /sys/fs/cgroup (hiding every host cgroup
// mount below it), an empty read-only tmpfs over any other cgroup mount,
// and /dev/null over the service managers' sockets. *host_proc is the
// harness's /proc (O_PATH), opened before it was covered, for the command's
// pid as the harness numbers it; the caller closes it. 0, or the errno of
// the step that failed, with *step naming it (a syscall name).
int prepare(int* host_proc, const char** step);

// In the command's process, just before its exec: every capability gone
// (bounding set, ambient, inheritable, permitted, effective) and the
// securebits locked so that exec as uid 0 gives none back. 0 or an errno.
int drop_capabilities();

}  // namespace proctree::seal
