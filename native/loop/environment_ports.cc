// What calls listen on, asked off the JavaScript thread (PortsWorker): a
// call's tree, a cgroup named from outside, or sockets by their cgroup ids;
// each answer is posted as a kPorts event. describe() asks the same worker
// what /proc says of processes.
#include <utility>

#include "loop/environment.h"

namespace proctree {

SysError Environment::ports(uint64_t call_id, uint64_t* request) {
  if (closing_) return SysError::of(ECANCELED, "ports");
  if (SysError e = ensure_open()) return e;
  PortsQuery q;
  q.request = *request = ++next_ports_request_;
  if (Call* call = find(call_id)) {
    q.leaf = call->leaf_path();
    q.pids = call->members();
  }
  if (q.leaf.empty() && q.pids.empty()) {
    // Nothing of the tree is left: the answer needs no thread.
    CallEvent ev{};
    ev.kind = CallEvent::kPorts;
    ev.call_id = q.request;
    post(std::move(ev));
    return SysError::none();
  }
  if (SysError e = ports_.query(std::move(q))) return e;
  update_keep_alive();
  return SysError::none();
}

SysError Environment::ports_of_cgroup(const std::string& path, uint64_t* request) {
  PortsQuery q;
  q.leaf = path;
  q.members_from_leaf = true;
  return ask_ports(std::move(q), request);
}

SysError Environment::ports_of_cgroup_ids(std::vector<unsigned long long> ids, uint64_t* request) {
  PortsQuery q;
  q.cgroup_ids = std::move(ids);
  return ask_ports(std::move(q), request);
}

SysError Environment::describe(std::vector<pid_t> pids, uint64_t* request) {
  PortsQuery q;
  q.describe = true;
  q.pids = std::move(pids);
  return ask_ports(std::move(q), request);
}

SysError Environment::ask_ports(PortsQuery q, uint64_t* request) {
  if (closing_) return SysError::of(ECANCELED, "ports");
  if (SysError e = ensure_open()) return e;
  q.request = *request = ++next_ports_request_;
  if (SysError e = ports_.query(std::move(q))) return e;
  update_keep_alive();
  return SysError::none();
}

void Environment::on_ports_done() {
  for (PortsAnswer& a : ports_.take_done()) {
    CallEvent ev{};
    ev.kind = CallEvent::kPorts;
    ev.call_id = a.request;
    ev.error = a.error;
    ev.listeners = std::move(a.listeners);
    ev.described = a.described;
    ev.infos = std::move(a.infos);
    post(std::move(ev));
  }
  update_keep_alive();
}

}  // namespace proctree
