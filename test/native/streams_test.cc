// loop/streams.cc on the environment's own loop, without Node: a command's
// output read to the byte through the reactor and delivered as events; the
// end at EOF (with or without data left); finish() delivers what the pipe
// holds while a writer still has it open; writes queued and completed; no
// descriptor stays open; once closed the environment keeps nothing alive.
#include "loop/streams.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "check.h"
#include "kernel/stdio_fds.h"
#include "loop/environment.h"
#include "test_loop.h"

using proctree::CallEvent;
using proctree::Environment;
using proctree::Fd;
using proctree::Streams;
using proctree::SysError;

namespace {

int open_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// Collects each pipe's bytes and whether it ended; acknowledges chunks as
// the binding does once JavaScript has them.
struct Sink : proctree::EventSink {
  Environment* env = nullptr;
  std::map<uint64_t, std::string> bytes;
  std::map<uint64_t, int> ends;
  std::map<uint64_t, int> written;
  std::vector<CallEvent::Kind> call_events;
  void deliver(const CallEvent& ev) override {
    if (ev.kind == CallEvent::kOutput) {
      bytes[ev.call_id] += ev.data;
      env->streams().delivered(ev.call_id);
    } else if (ev.kind == CallEvent::kOutputEnd) {
      ++ends[ev.call_id];
    } else if (ev.kind == CallEvent::kWritten) {
      if (!ev.error) ++written[ev.call_id];
    } else {
      call_events.push_back(ev.kind);
    }
  }
};

// One environment on its own loop, with its sink; closed on every way out
// of a test (a failed CHECK returns early), or by close() to check the rc.
struct Harness {
  TestLoop loop;
  Sink sink;
  Environment* env;
  Harness() : env(new Environment(&sink, &loop)) {
    sink.env = env;
    loop.env = env;
  }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;
  ~Harness() { close(); }
  Streams& pipes() { return env->streams(); }
  // A stream of `kind` and the child's end of it.
  SysError open(Streams::Kind kind, uint64_t* id, Fd* child_end) {
    int our_fd = -1;
    return pipes().open(kind, id, child_end, &our_fd);
  }
  // Closes the environment: 0 when nothing keeps the loop alive after it.
  int close() {
    if (!env) return 0;
    env->close();
    delete env;
    env = nullptr;
    loop.env = nullptr;
    // The loop's own descriptor goes too (the Waiter is joined).
    loop.woken.reset();
    return loop.alive ? 1 : 0;
  }
};

}  // namespace

// A command writing 300 000 bytes to stdout and a line to stderr, in the
// pgroup tier (no cgroup needed): every byte, each pipe ended once. Twice:
// the first spawn opens what the process keeps for good (/dev/null), the
// second must leave the descriptor count as it found it.
void command_output(bool* passed) {
  Harness h;
  Environment* env = h.env;
  Sink& sink = h.sink;
  uint64_t out_id = 0, err_id = 0;
  Fd out_w, err_w;
  int our_fd = -1;
  CHECK_EQ(env->streams().open(Streams::kOutput, &out_id, &out_w, &our_fd).err, 0);
  CHECK_EQ(env->streams().open(Streams::kOutput, &err_id, &err_w, &our_fd).err, 0);
  CHECK(out_id != err_id);
  // Our read ends are non-blocking, the child's write ends are not.
  CHECK_EQ(fcntl(out_w.get(), F_GETFL) & O_NONBLOCK, 0);
  proctree::SpawnRequest req;
  req.candidates = {"/bin/sh"};
  req.argv = {"sh", "-c", "head -c 300000 /dev/zero; echo done >&2"};
  req.envp = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  req.fds = {proctree::dev_null_fd(), out_w.get(), err_w.get()};
  proctree::SpawnOptions opts;
  opts.tier = proctree::Tier::kPgroup;
  proctree::SpawnedCall call;
  CHECK_EQ(env->spawn(opts, req, &call).err, 0);
  out_w.reset();
  err_w.reset();
  bool ok = h.loop.run_until([&] { return sink.ends[out_id] == 1 && sink.ends[err_id] == 1 && sink.call_events.size() >= 2; });
  CHECK(ok);
  CHECK_EQ(sink.bytes[out_id].size(), size_t{300000});
  CHECK(sink.bytes[out_id].find_first_not_of('\0') == std::string::npos);
  CHECK_EQ(sink.bytes[err_id], std::string("done\n"));
  CHECK_EQ(env->streams().open_count(), size_t{0});
  CHECK_EQ(h.close(), 0);
  *passed = true;
}

TEST(command_output_read_to_the_byte) {
  bool first = false, second = false;
  command_output(&first);
  CHECK(first);
  int fds_before = open_fds();
  command_output(&second);
  CHECK(second);
  CHECK_EQ(open_fds(), fds_before);
}

// Every writer gone before anything was written: only the end.
TEST(end_without_data) {
  Harness h;
  uint64_t id = 0;
  Fd w;
  CHECK_EQ(h.open(Streams::kOutput, &id, &w).err, 0);
  w.reset();
  CHECK(h.loop.run_until([&] { return h.sink.ends[id] == 1; }));
  CHECK(h.sink.bytes[id].empty());
  CHECK_EQ(h.close(), 0);
}

// finish(): a writer (outside any tree) still holds the pipe; what it wrote
// is delivered, then the end, and nothing more is read.
TEST(finish_delivers_what_the_pipe_holds) {
  int fds_before = open_fds();
  Harness h;
  uint64_t id = 0;
  Fd w;
  CHECK_EQ(h.open(Streams::kOutput, &id, &w).err, 0);
  std::string data(50000, 'q');
  CHECK_EQ(write(w.get(), data.data(), data.size()), static_cast<ssize_t>(data.size()));
  h.pipes().finish(id);
  CHECK_EQ(h.pipes().open_count(), size_t{0});
  CHECK(h.loop.run_until([&] { return h.sink.ends[id] == 1; }));
  CHECK_EQ(h.sink.bytes[id], data);
  // Later writes go nowhere (EPIPE: the read end is closed), and the
  // finished id is unknown now.
  signal(SIGPIPE, SIG_IGN);
  CHECK(write(w.get(), "x", 1) < 0);
  h.pipes().finish(id);
  h.pipes().delivered(id);
  w.reset();
  CHECK_EQ(h.close(), 0);
  CHECK_EQ(open_fds(), fds_before);
}

// backlog(): what a reader has yet to get. Bytes in the pipe (a writer
// still holds it: no end follows); then every writer gone (the end
// follows); once read to its end, the stream is gone and only its end is
// left to deliver.
TEST(backlog_counts_the_pipe_and_says_when_the_end_follows) {
  Harness h;
  uint64_t id = 0;
  Fd w;
  CHECK_EQ(h.open(Streams::kReader, &id, &w).err, 0);
  size_t bytes = 99;
  bool end_follows = true;
  h.pipes().backlog(id, &bytes, &end_follows);
  CHECK_EQ(bytes, size_t{0});
  CHECK(!end_follows);
  std::string data(1000, 'b');
  CHECK_EQ(write(w.get(), data.data(), data.size()), static_cast<ssize_t>(data.size()));
  h.pipes().backlog(id, &bytes, &end_follows);
  CHECK_EQ(bytes, size_t{1000});
  CHECK(!end_follows);
  w.reset();
  h.pipes().backlog(id, &bytes, &end_follows);
  CHECK_EQ(bytes, size_t{1000});
  CHECK(end_follows);
  // Read (the sink acknowledges each chunk as it comes) to the end: the
  // stream is gone, and its end is what is left.
  h.pipes().read_start(id);
  CHECK(h.loop.run_until([&] { return h.sink.ends[id] == 1; }));
  CHECK_EQ(h.sink.bytes[id], data);
  h.pipes().backlog(id, &bytes, &end_follows);
  CHECK_EQ(bytes, size_t{0});
  CHECK(end_follows);
  CHECK_EQ(h.close(), 0);
}

// A socketpair (fd 3 and up): 1 MB written in four writes, most of it
// queued (the socket takes far less at once); each write completes once, in
// order; `cat` on the other end echoes everything, and the end of our
// writing (shutdown) is its EOF, then ours.
TEST(duplex_written_and_read_back) {
  int fds_before = open_fds();
  {
    Harness h;
    Environment* env = h.env;
    uint64_t id = 0;
    Fd theirs;
    int our_fd = -1;
    CHECK_EQ(env->streams().open(Streams::kDuplex, &id, &theirs, &our_fd).err, 0);
    CHECK(our_fd >= 0);
    env->streams().read_start(id);
    proctree::SpawnRequest req;
    req.candidates = {"/bin/cat"};
    req.argv = {"cat"};
    req.envp = {"PATH=/usr/local/bin:/usr/bin:/bin"};
    req.fds = {theirs.get(), theirs.get(), proctree::dev_null_fd()};
    proctree::SpawnOptions opts;
    opts.tier = proctree::Tier::kPgroup;
    proctree::SpawnedCall call;
    CHECK_EQ(env->spawn(opts, req, &call).err, 0);
    theirs.reset();
    // Loop::run_until runs the loop once more after its check holds, until
    // nothing keeps it alive: neither the call nor the stream may then.
    env->set_referenced(call.id, false);
    env->streams().set_ref(id, false);
    std::string data;
    for (int i = 0; i < 1000000; ++i) data.push_back(static_cast<char>('a' + i % 26));
    int queued_writes = 0;
    for (int part = 0; part < 4; ++part) {
      bool queued = false;
      CHECK_EQ(env->streams().write(id, data.data() + part * 250000, 250000, &queued).err, 0);
      queued_writes += queued;
    }
    CHECK(queued_writes > 0);
    CHECK(h.loop.run_until([&] { return h.sink.written[id] == queued_writes; }));
    CHECK_EQ(env->streams().shutdown(id).err, 0);
    bool ok = h.loop.run_until([&] { return h.sink.ends[id] == 1 && h.sink.call_events.size() >= 2; });
    CHECK(ok);
    CHECK(h.sink.bytes[id] == data);
    // Writing after the end of writing is refused.
    bool queued = false;
    CHECK_EQ(env->streams().write(id, "x", 1, &queued).err, EBADF);
    env->streams().close(id);
    CHECK_EQ(env->streams().open_count(), size_t{0});
    CHECK_EQ(h.close(), 0);
  }
  CHECK_EQ(open_fds(), fds_before);
}

CHECK_MAIN()
