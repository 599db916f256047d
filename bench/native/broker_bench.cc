// What a spawn through the systemd tier's broker costs against a direct
// spawn into a cgroup leaf (the cgroup tier), on this host, without systemd:
// the broker runs in a cgroup of the bench's own, as in broker_test.
// Both sides create a leaf, start /bin/true straight into it, wait for its
// exit and remove the leaf; the trials alternate, so both see the same
// machine load. Prints the medians (and min/max) of two intervals, from the
// request to the pidfd in hand and from the request to the exit status in
// hand, and the ratio of the medians. Nothing here asserts.
//   broker_bench [iterations]   (default 300; needs a writable cgroup2)
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fixtures.h"
#include "kernel/broker_client.h"
#include "kernel/cgroup.h"
#include "kernel/pidfd.h"
#include "kernel/spawn.h"

using proctree::BrokerClient;
using proctree::BrokerEvent;

namespace {

double now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct Sample {
  double started;  // request -> pidfd
  double exited;   // request -> exit status
};

proctree::ChildStack& stack() {
  static proctree::ChildStack s;
  return s;
}

bool direct(const std::string& scope, int n, Sample* out) {
  double t0 = now_us();
  proctree::CgroupDir leaf;
  if (proctree::CgroupDir::create(scope + "/direct-" + std::to_string(n), false, &leaf)) return false;
  proctree::SpawnRequest req;
  req.candidates = {"/bin/true"};
  req.argv = {"true"};
  req.cgroup_dir = leaf.dir_fd();
  proctree::SpawnResult r;
  if (proctree::spawn_process(req, stack(), &r)) return false;
  double t1 = now_us();
  proctree::ExitStatus st = fixtures::wait_exit(r.pidfd.get());
  double t2 = now_us();
  leaf.remove();
  *out = {t1 - t0, t2 - t0};
  return st.done;
}

BrokerEvent next_event(BrokerClient& c) {
  BrokerEvent ev;
  for (;;) {
    if (c.receive(&ev) || ev.kind != BrokerEvent::kNone) return ev;
    pollfd p{c.socket_fd(), POLLIN, 0};
    poll(&p, 1, 5000);
  }
}

bool brokered(BrokerClient& c, const std::string& scope, int n, Sample* out) {
  double t0 = now_us();
  proctree::BrokerSpawn s;
  s.candidates = {"/bin/true"};
  s.argv = {"true"};
  s.leaf = "brokered-" + std::to_string(n);
  uint64_t id;
  if (c.send_spawn(s, &id)) return false;
  BrokerEvent ev = next_event(c);
  if (ev.kind != BrokerEvent::kSpawned) return false;
  double t1 = now_us();
  BrokerEvent exit = next_event(c);
  if (exit.kind != BrokerEvent::kExited) return false;
  double t2 = now_us();
  rmdir((scope + "/" + s.leaf).c_str());
  *out = {t1 - t0, t2 - t0};
  return true;
}

struct Stats {
  double median, min, max;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = argc > 1 ? atoi(argv[1]) : 300;
  if (iterations < 1) iterations = 1;
  proctree::CgroupDir scope;
  std::string why;
  std::string path = fixtures::make_test_cgroup(&scope, &why);
  if (path.empty()) {
    fprintf(stderr, "broker_bench: %s\n", why.c_str());
    return 77;
  }
  proctree::BrokerLaunch launch;
  launch.helper = PROCTREE_HELPER_PATH;
  launch.cgroup_dir = scope.dir_fd();
  BrokerClient c;
  BrokerEvent ready;
  int rc = 1;
  if (!BrokerClient::start(launch, stack(), &c) && !c.wait_ready(5000, &ready) && ready.kind == BrokerEvent::kReady) {
    std::vector<double> ds, de, bs, be;
    rc = 0;
    for (int i = 0; i < iterations && rc == 0; ++i) {
      Sample d{}, b{};
      if (!direct(path, i, &d) || !brokered(c, path, i, &b)) rc = 1;
      ds.push_back(d.started);
      de.push_back(d.exited);
      bs.push_back(b.started);
      be.push_back(b.exited);
    }
    if (rc == 0) {
      Stats s1 = stats(ds), s2 = stats(bs), e1 = stats(de), e2 = stats(be);
      printf("%d spawns of /bin/true each, alternating (microseconds: median [min..max])\n", iterations);
      printf("  request -> pidfd        direct %7.1f [%.1f..%.1f]   broker %7.1f [%.1f..%.1f]   ratio %.2f\n",
             s1.median, s1.min, s1.max, s2.median, s2.min, s2.max, s2.median / s1.median);
      printf("  request -> exit status  direct %7.1f [%.1f..%.1f]   broker %7.1f [%.1f..%.1f]   ratio %.2f\n",
             e1.median, e1.min, e1.max, e2.median, e2.min, e2.max, e2.median / e1.median);
    } else {
      fprintf(stderr, "broker_bench: a spawn failed\n");
    }
  } else {
    fprintf(stderr, "broker_bench: the broker did not start\n");
  }
  c.close();
  fixtures::wait_exit(c.process_pidfd());
  fixtures::destroy_test_cgroup(&scope);
  return rc;
}
