// Pipes whose read end the addon reads itself: the stdout and stderr of a
// call started by run(), whose caller can never read the streams and only
// wants what they carried. A net.Socket per stream costs the harness about
// 100 µs and a dozen system calls (fcntl, ioctl, fstat, epoll_ctl) per call;
// here the read end sits in the reactor's epoll set like a pidfd, is read in
// the reactor's turn, and each chunk goes to JavaScript through the
// Environment's event queue, in order with the calls' own events.
//
// Each pipe has its own id (its chunks are tagged by it) and lives until its
// end is delivered: EOF (every writer closed it), or finish() (the tree is
// gone and whatever holds the pipe open is not ours to wait for).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

class Environment;

class OutputPipes {
 public:
  explicit OutputPipes(Environment* env) : env_(env) {}
  OutputPipes(const OutputPipes&) = delete;
  OutputPipes& operator=(const OutputPipes&) = delete;

  // Makes a pipe and starts watching its read end (non-blocking, ours); the
  // write end (blocking, close-on-exec) is for the child, lifted above its
  // stdio numbers by the spawn as any other. All or nothing.
  SysError open(uint64_t* id, Fd* write_end);
  // The reactor saw the read end of `id` ready (epoll events).
  void on_ready(uint64_t id, uint32_t events);
  // JavaScript took a chunk of `id`: the next one may be read.
  void delivered(uint64_t id);
  // Stops waiting for EOF: what the pipe holds now is read and delivered
  // (bounded), then its end. No-op for an id already ended.
  void finish(uint64_t id);
  size_t open_count() const { return pipes_.size(); }

  // Bytes read from one pipe per turn of the loop, as libuv reads a stream
  // (a writer faster than us blocks on its full pipe, not our loop).
  static constexpr size_t kChunk = 64 * 1024;
  // finish(): at most this much more is taken from a pipe still being
  // written (by a process outside the tree that was handed it).
  static constexpr size_t kFinishMax = 4 * 1024 * 1024;

 private:
  struct Pipe {
    Fd fd;
    // A chunk is on its way to JavaScript: reading waits for it, so a
    // listener slower than the writer holds the writer back, not our memory.
    bool in_flight = false;
    bool armed = true;  // EPOLLIN in the epoll set (else only a hang-up, once)
  };
  enum class Read { kMore, kDrained, kEnd };
  // One read of at most kChunk into a posted chunk.
  Read read_once(uint64_t id, Pipe* p);
  void end(uint64_t id);
  void set_armed(Pipe* p, uint64_t id, bool armed);

  Environment* env_;
  std::unordered_map<uint64_t, Pipe> pipes_;
  uint64_t next_id_ = 1;
  std::string scratch_;
};

}  // namespace proctree
