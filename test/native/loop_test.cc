// The loop of our own, piece by piece, without Node: errno names as Node
// spells them; timers in deadline order from one timerfd; the Waiter thread
// wakes once per re-arm (a descriptor that stays ready does not make it
// spin) and is joined by stop(); the file writer's writes land in order and
// are counted back; an Environment delivers one event per callback into
// JavaScript and keeps the loop alive exactly while a referenced call lives.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "kernel/stdio_fds.h"
#include "loop/environment.h"
#include "loop/errno_name.h"
#include "loop/file_writer.h"
#include "loop/job_thread.h"
#include "loop/ports_worker.h"
#include "loop/timers.h"
#include "loop/waiter.h"
#include "test_loop.h"

using proctree::CallEvent;
using proctree::Environment;
using proctree::Fd;

namespace {

bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, ms) > 0;
}

void sleep_ms(int ms) { poll(nullptr, 0, ms); }

}  // namespace

TEST(errno_names_are_nodes) {
  CHECK_EQ(std::string(proctree::errno_name(EPERM)), std::string("EPERM"));
  CHECK_EQ(std::string(proctree::errno_name(ENOENT)), std::string("ENOENT"));
  CHECK_EQ(std::string(proctree::errno_name(EAGAIN)), std::string("EAGAIN"));
  CHECK_EQ(std::string(proctree::errno_name(EDEADLK)), std::string("EDEADLK"));
  CHECK_EQ(std::string(proctree::errno_name(EOPNOTSUPP)), std::string("ENOTSUP"));
  CHECK_EQ(std::string(proctree::errno_name(ECHILD)), std::string("ECHILD"));
  CHECK_EQ(std::string(proctree::errno_name(ECANCELED)), std::string("ECANCELED"));
  CHECK_EQ(std::string(proctree::errno_name(EHWPOISON)), std::string("EHWPOISON"));
  CHECK_EQ(std::string(proctree::errno_name(41)), std::string("Unknown system error -41"));
  CHECK_EQ(std::string(proctree::errno_name(4000)), std::string("Unknown system error -4000"));
}

TEST(timers_run_in_deadline_order) {
  proctree::Timers timers;
  CHECK_EQ(timers.open().err, 0);
  std::string order;
  int again = 0;
  proctree::Timer a(&timers, [&] { order += 'a'; });
  proctree::Timer b(&timers, [&] { order += 'b'; });
  proctree::Timer c(&timers, [&] { order += 'c'; });
  // Started again from its own callback: due a turn later, never the same.
  proctree::Timer d(&timers, [&] {
    order += 'd';
    if (++again < 3) d.start(1);
  });
  a.start(40);
  b.start(10);
  c.start(20);
  d.start(5);
  c.stop();
  CHECK(!c.active());
  const uint64_t deadline = proctree::monotonic_ns() + 5000000000ULL;
  while ((order.find('a') == std::string::npos || again < 3) && proctree::monotonic_ns() < deadline) {
    if (readable(timers.fd(), 100)) timers.run_due();
  }
  CHECK_EQ(again, 3);
  std::string ab;
  for (char ch : order) {
    if (ch == 'a' || ch == 'b') ab += ch;
  }
  CHECK_EQ(ab, std::string("ba"));
  CHECK(order.find('c') == std::string::npos);
  CHECK(!a.active());
  // Nothing left: the timerfd is disarmed.
  CHECK(!readable(timers.fd(), 50));
}

TEST(waiter_wakes_once_per_rearm_and_stops) {
  Fd epoll(epoll_create1(EPOLL_CLOEXEC));
  Fd ready(eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK));  // readable, and stays so
  epoll_event ev{};
  ev.events = EPOLLIN;
  CHECK_EQ(epoll_ctl(epoll.get(), EPOLL_CTL_ADD, ready.get(), &ev), 0);
  std::atomic<int> wakes{0};
  proctree::Waiter waiter;
  CHECK_EQ(waiter.start(epoll.get(), [](void* n) { ++*static_cast<std::atomic<int>*>(n); }, &wakes).err, 0);
  for (int i = 0; i < 500 && wakes.load() == 0; ++i) sleep_ms(2);
  CHECK_EQ(wakes.load(), 1);
  sleep_ms(50);
  CHECK_EQ(wakes.load(), 1);  // not again before the turn re-arms it
  waiter.rearm(false);
  for (int i = 0; i < 500 && wakes.load() == 1; ++i) sleep_ms(2);
  CHECK_EQ(wakes.load(), 2);
  waiter.rearm(true);  // a yielded turn: woken a moment later
  for (int i = 0; i < 500 && wakes.load() == 2; ++i) sleep_ms(2);
  CHECK_EQ(wakes.load(), 3);
  waiter.stop();
  CHECK(!waiter.running());
  waiter.rearm(false);
  sleep_ms(30);
  CHECK_EQ(wakes.load(), 3);
}

TEST(file_writer_writes_in_order_off_the_thread) {
  char path[] = "/tmp/proctree-loop-test-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  int changes = 0;
  {
    proctree::FileWriter w;
    CHECK_EQ(w.open([](void* n) { ++*static_cast<int*>(n); }, &changes).err, 0);
    // Each write starts at offset 0: what is left is the last one.
    for (const char* v : {"1", "2", "3", "4"}) w.write_later(path, v);
    CHECK(w.busy());
    CHECK_EQ(changes, 1);
    for (int i = 0; i < 500 && w.busy(); ++i) {
      if (readable(w.done_fd(), 10)) w.on_done();
    }
    CHECK(!w.busy());
    CHECK_EQ(changes, 2);
    w.close();
    w.write_later(path, "9");  // closed: dropped
  }
  char buf[8] = {};
  int rfd = open(path, O_RDONLY | O_CLOEXEC);
  CHECK_EQ(read(rfd, buf, sizeof buf), 1);
  close(rfd);
  unlink(path);
  CHECK_EQ(std::string(buf), std::string("4"));
}

// What a tree listens on is asked on the worker's thread; the answers come
// through the eventfd, in order, each with its request id; close() drops
// what is queued and joins the thread.
// JobThread: jobs run in order on a thread of their own; their ids come back
// through the eventfd; descriptors a job leaves late are closed after its end
// is told; close() lets a running job finish and joins.
TEST(job_thread_runs_in_order_off_the_thread) {
  proctree::JobThread jobs("proctree-test", 0);
  CHECK_EQ(jobs.open().err, 0);
  const pid_t me = static_cast<pid_t>(gettid());
  std::atomic<int> order{0};
  pid_t ran_on[2] = {0, 0};
  int seen[2] = {0, 0};
  int left[2];
  CHECK_EQ(pipe2(left, O_CLOEXEC), 0);
  Fd write_end(left[1]);
  CHECK_EQ(jobs.run(11, [&](std::vector<Fd>* late) {
                 ran_on[0] = static_cast<pid_t>(gettid());
                 seen[0] = ++order;
                 late->push_back(std::move(write_end));
               }).err,
           0);
  CHECK_EQ(jobs.run(12, [&](std::vector<Fd>*) {
                 ran_on[1] = static_cast<pid_t>(gettid());
                 seen[1] = ++order;
               }).err,
           0);
  CHECK(jobs.busy());
  std::vector<uint64_t> ids;
  for (int i = 0; i < 500 && ids.size() < 2; ++i) {
    if (!readable(jobs.done_fd(), 10)) continue;
    for (uint64_t id : jobs.take_done()) ids.push_back(id);
  }
  CHECK(!jobs.busy());
  CHECK_EQ(ids.size(), 2u);
  CHECK_EQ(ids[0], 11u);
  CHECK_EQ(ids[1], 12u);
  CHECK_EQ(seen[0], 1);
  CHECK_EQ(seen[1], 2);
  CHECK(ran_on[0] > 0 && ran_on[0] != me);
  CHECK_EQ(ran_on[0], ran_on[1]);
  // The write end the first job left late is closed: the read end sees EOF.
  CHECK(readable(left[0], 3000));
  char c;
  CHECK_EQ(read(left[0], &c, 1), 0);
  close(left[0]);

  // close() lets a running job finish, then joins; later jobs are refused.
  int fds[2];
  CHECK_EQ(pipe2(fds, O_CLOEXEC), 0);
  std::atomic<bool> started{false}, finished{false};
  CHECK_EQ(jobs.run(13, [&](std::vector<Fd>*) {
                 started = true;
                 char c;
                 while (read(fds[0], &c, 1) < 0 && errno == EINTR) {
                 }
                 finished = true;
               }).err,
           0);
  for (int i = 0; i < 3000 && !started; ++i) usleep(1000);
  CHECK(started);
  std::thread later([&] {
    usleep(20 * 1000);
    ssize_t w = write(fds[1], "x", 1);
    (void)w;
  });
  jobs.close();
  later.join();
  CHECK(finished);
  CHECK(jobs.run(15, [](std::vector<Fd>*) {}).err != 0);
  close(fds[0]);
  close(fds[1]);
}

// With abandon_after_ms, close() waits that long for a running job and then
// leaves the thread to finish it alone (a /proc read that waits on a
// process stuck in the kernel must not hold a teardown): close() returns in
// time, the job still finishes with everything it owns, and the thread frees
// what it shares (the sanitizers' run sees no leak and no use after free).
TEST(job_thread_abandons_a_stuck_job_at_close) {
  int fds[2];
  CHECK_EQ(pipe2(fds, O_CLOEXEC), 0);
  auto box = std::make_shared<std::atomic<int>>(0);
  std::atomic<bool> started{false};
  {
    proctree::JobThread jobs("proctree-test", 0, 50);
    CHECK_EQ(jobs.open().err, 0);
    CHECK_EQ(jobs.run(21, [&started, box, rfd = fds[0]](std::vector<Fd>*) {
                   started = true;
                   char c;
                   while (read(rfd, &c, 1) < 0 && errno == EINTR) {
                   }
                   box->store(1);
                 }).err,
             0);
    CHECK_EQ(jobs.run(22, [box](std::vector<Fd>*) { box->store(2); }).err, 0);
    for (int i = 0; i < 3000 && !started; ++i) usleep(1000);
    CHECK(started);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(jobs.close());
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    CHECK(waited >= 40 && waited < 2000);
    CHECK_EQ(box->load(), 0);
    CHECK(jobs.run(23, [](std::vector<Fd>*) {}).err != 0);
  }  // the JobThread is gone; its thread is not
  CHECK_EQ(write(fds[1], "x", 1), 1);
  // The job finishes (the queued one never runs) and drops its hold on box.
  for (int i = 0; i < 3000 && box.use_count() > 1; ++i) usleep(1000);
  CHECK_EQ(box->load(), 1);
  CHECK_EQ(box.use_count(), 1);
  close(fds[0]);
  close(fds[1]);

  // A job that ends in time is waited for and joined, as without the bound.
  proctree::JobThread quick("proctree-test", 0, 2000);
  CHECK_EQ(quick.open().err, 0);
  std::atomic<bool> began{false}, done{false};
  CHECK_EQ(quick.run(31, [&began, &done](std::vector<Fd>*) {
                  began = true;
                  usleep(20 * 1000);
                  done = true;
                }).err,
           0);
  for (int i = 0; i < 3000 && !began; ++i) usleep(1000);
  CHECK(!quick.close());
  CHECK(done);
}

TEST(ports_worker_answers_off_the_thread) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  CHECK_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof a;
  CHECK_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);

  proctree::PortsWorker w;
  CHECK_EQ(w.open().err, 0);
  proctree::PortsQuery mine;
  mine.request = 7;
  mine.pids = {getpid()};
  proctree::PortsQuery none;
  none.request = 8;
  none.pids = {};
  CHECK_EQ(w.query(mine).err, 0);
  CHECK_EQ(w.query(none).err, 0);
  CHECK(w.busy());
  std::vector<proctree::PortsAnswer> got;
  for (int i = 0; i < 500 && got.size() < 2; ++i) {
    if (!readable(w.done_fd(), 10)) continue;
    for (auto& ans : w.take_done()) got.push_back(std::move(ans));
  }
  CHECK(!w.busy());
  CHECK_EQ(got.size(), 2u);
  CHECK_EQ(got[0].request, 7u);
  CHECK_EQ(got[0].error.err, 0);
  bool found = false;
  for (const auto& l : got[0].listeners) {
    if (l.protocol == proctree::ListenerProtocol::tcp && l.port == port && l.pid == getpid()) found = true;
  }
  CHECK(found);
  CHECK_EQ(got[1].request, 8u);
  CHECK(got[1].listeners.empty());
  w.close();
  CHECK(w.query(mine).err != 0);  // closed: refused, nothing queued
  close(fd);
}

namespace {

struct Counting : proctree::EventSink {
  std::vector<CallEvent::Kind> kinds;
  int per_callback_max = 0;
  int in_callback = 0;
  void deliver(const CallEvent& ev) override { kinds.push_back(ev.kind); }
};

proctree::SpawnRequest shell(const std::string& script, proctree::PreparedStdio* io) {
  std::vector<proctree::StdioSpec> spec(3, proctree::StdioSpec{proctree::StdioSpec::kIgnore, -1});
  proctree::prepare_stdio(spec, proctree::PtySize{}, io);
  proctree::SpawnRequest req;
  req.candidates = {"/bin/sh"};
  req.argv = {"sh", "-c", script};
  req.envp = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  req.fds = io->fds;
  return req;
}

}  // namespace

// The pgroup tier (no cgroup needed): a referenced call keeps the loop alive
// until its last event is out; each turn or delivery hands JavaScript one
// event at most; an unreferenced call keeps nothing alive.
TEST(one_event_per_callback_and_keep_alive) {
  Counting sink;
  TestLoop loop;
  Environment* env = new Environment(&sink, &loop);
  loop.env = env;
  proctree::SpawnOptions opts;
  opts.tier = proctree::Tier::kPgroup;
  proctree::PreparedStdio io;
  proctree::SpawnedCall call;
  CHECK_EQ(env->spawn(opts, shell("exit 3", &io), &call).err, 0);
  for (auto& f : io.child) f.reset();
  CHECK(loop.alive);
  const uint64_t deadline = TestLoop::now_ms() + 10000;
  int most = 0;
  while ((loop.alive || loop.deliver) && TestLoop::now_ms() < deadline) {
    size_t before = sink.kinds.size();
    loop.step(10);
    most = std::max(most, static_cast<int>(sink.kinds.size() - before));
  }
  CHECK(!loop.alive);
  CHECK_EQ(most, 1);
  CHECK_EQ(sink.kinds.size(), size_t{3});
  if (sink.kinds.size() == 3) {
    CHECK_EQ(sink.kinds[0], CallEvent::kStarted);  // the exec's report
    CHECK_EQ(sink.kinds[1], CallEvent::kExit);
    CHECK_EQ(sink.kinds[2], CallEvent::kEmpty);
  }
  CHECK(env->find(call.id) == nullptr);

  proctree::PreparedStdio io2;
  proctree::SpawnedCall sleeper;
  CHECK_EQ(env->spawn(opts, shell("exec sleep 30", &io2), &sleeper).err, 0);
  for (auto& f : io2.child) f.reset();
  CHECK(loop.alive);
  env->set_referenced(sleeper.id, false);
  CHECK(!loop.alive);
  env->set_referenced(sleeper.id, true);
  CHECK(loop.alive);
  env->shutdown_sync(2000);
  env->close();
  CHECK(!loop.alive);
  delete env;
}

CHECK_MAIN()
