// The broker of the systemd tier: `proctree-helper broker <harness-pid>
// <harness-start-time>`, started by the harness (kernel/broker_client.h)
// inside a transient scope that the user manager delegated to the harness's
// uid (`systemd-run --user --scope -p Delegate=yes`). The harness can do
// everything in that scope but one thing: start a process in it, because the
// kernel lets a process move or clone into a cgroup only when it can write
// the common ancestor's cgroup.procs, and from a root-owned session scope
// that ancestor is root's. The broker is already inside, so it starts each
// call straight into a fresh leaf (clone3 + CLONE_INTO_CGROUP) and hands the
// harness the pidfd; the harness runs the cgroup tier's ladder itself.
//
// Life cycle: the broker moves itself into <scope>/broker (the scope must
// not hold processes once leaves exist beside them if controllers are ever
// enabled in it: the no-internal-process rule), makes <scope>/<leaf> per
// call, and the harness removes leaves after its ladder. When the harness
// dies (its pidfd turns readable) or closes the socket, the broker kills
// every leaf (cgroup.kill, or freeze + SIGKILL rounds before Linux 5.14, or
// with PROCTREE_TEST_NO_CGROUP_KILL=1 in its environment),
// removes them and exits; systemd then removes the empty scope.
// Protocol: kernel/broker_protocol.h.
#pragma once

namespace proctree {

int broker_main(int argc, char** argv);

}  // namespace proctree
