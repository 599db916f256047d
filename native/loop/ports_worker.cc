#include "loop/ports_worker.h"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "kernel/cgroup.h"

namespace proctree {

PortsWorker::~PortsWorker() { close(); }

SysError PortsWorker::query(PortsQuery q) {
  SysError e = jobs_.run(q.request, [answers = answers_, q = std::move(q)](std::vector<Fd>*) {
    PortsAnswer a = answer(q);
    pthread_mutex_lock(&answers->mu);
    answers->list.push_back(std::move(a));
    pthread_mutex_unlock(&answers->mu);
  });
  return e && e.err == ECANCELED ? SysError::of(ECANCELED, "ports") : e;
}

std::vector<PortsAnswer> PortsWorker::take_done() {
  // Only the answers of queries told done: the next one may be in already,
  // its end not told yet (it is counted when it is).
  std::vector<PortsAnswer> out;
  Answers& answers = *answers_;
  for (uint64_t request : jobs_.take_done()) {
    pthread_mutex_lock(&answers.mu);
    auto it = std::find_if(answers.list.begin(), answers.list.end(), [&](const PortsAnswer& a) { return a.request == request; });
    if (it != answers.list.end()) {
      out.push_back(std::move(*it));
      answers.list.erase(it);
    }
    pthread_mutex_unlock(&answers.mu);
  }
  return out;
}

PortsAnswer PortsWorker::answer(const PortsQuery& q) {
  PortsAnswer a;
  a.request = q.request;
  if (q.describe) {
    a.described = true;
    a.infos.reserve(q.pids.size());
    for (pid_t pid : q.pids) {
      ProcessInfo p;
      if (read_process_info(pid, &p)) a.infos.push_back(std::move(p));
    }
    return a;
  }
  if (!q.cgroup_ids.empty()) {
    if (cgroup_socket_filter_available()) a.error = listeners_of_cgroup_ids(q.cgroup_ids, &a.listeners);
  } else if (!q.leaf.empty() && cgroup_socket_filter_available()) {
    a.error = listeners_in_cgroup(q.leaf, &a.listeners);
    // The leaf is gone (the tree ended and it was removed): nothing listens.
    if (a.error && a.error.err == ENOENT) {
      a.error = SysError::none();
      a.listeners.clear();
    }
  } else if (q.members_from_leaf) {
    CgroupDir dir;
    std::vector<pid_t> pids;
    if (!CgroupDir::open_existing(q.leaf, &dir)) dir.read_procs(&pids);
    dir.close();
    a.error = listeners_of_pids(pids, &a.listeners);
  } else {
    a.error = listeners_of_pids(q.pids, &a.listeners);
  }
  return a;
}

void PortsWorker::close() {
  jobs_.close();
  pthread_mutex_lock(&answers_->mu);
  answers_->list.clear();
  pthread_mutex_unlock(&answers_->mu);
}

}  // namespace proctree
