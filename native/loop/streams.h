// A call's pipes and terminal, read and written here rather than through a
// libuv stream (net.Socket, tty.ReadStream): our end of each sits in the
// reactor's epoll set like a pidfd, non-blocking, and is read and written in
// the reactor's turn. Chunks read, the end, and the completion of each write
// go to JavaScript through the Environment's event queue, in order with the
// calls' own events (output written before an exit arrives before it).
//
// Kinds:
//   kOutput  run()'s stdout or stderr: always read, nobody but the addon
//            ever holds it; closed at its end.
//   kReader  a pipe the child writes (stdout, stderr): read while
//            JavaScript wants it (read_start/read_stop); closed at its end.
//   kWriter  a pipe the child reads (stdin): written.
//   kDuplex  a socketpair (fd 3 and up): both, and shutdown() ends writing.
//   terminal a pty master we were handed (adopt): both; EIO reading is its
//            end (no process holds the slave), EIO writing drops the bytes.
//
// Reading: one chunk in flight at a time. The next read waits until the
// binding has handed the last one to JavaScript (delivered()), so a slow
// listener holds the writer back, not our memory; read_stop() (a Readable
// whose buffer is full) stops reading until read_start().
//
// Writing: write() writes what the pipe takes at once; the rest is queued
// and written when the reactor sees the fd writable (EPOLLOUT), and a
// kWritten event says when all of it is in the pipe, or why not (EPIPE:
// nobody reads any more). Completions come in the order of the writes.
//
// A stream that reads or has writes queued keeps the loop alive (as a libuv
// stream handle does) unless unref'd.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>

#include "kernel/fd.h"
#include "kernel/sys_error.h"

namespace proctree {

class Environment;

class Streams {
 public:
  enum Kind { kOutput = 0, kReader = 1, kWriter = 2, kDuplex = 3, kTerminal = 4 };

  explicit Streams(Environment* env) : env_(env) {}
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;

  // Makes a pipe (a socketpair for kDuplex) and watches our end
  // (non-blocking); the child's end (blocking, close-on-exec) is for the
  // spawn, which lifts it above the child's stdio numbers as any other.
  // *our_fd: our end's number (ioctls, passing it to another call). All or
  // nothing.
  SysError open(Kind kind, uint64_t* id, Fd* child_end, int* our_fd);
  // A pty master (kTerminal), owned from now on.
  SysError adopt(Fd fd, uint64_t* id);

  // The reactor saw `id` ready (epoll events).
  void on_ready(uint64_t id, uint32_t events);
  // JavaScript took a chunk of `id`: the next one may be read.
  void delivered(uint64_t id);
  void read_start(uint64_t id);
  void read_stop(uint64_t id);
  // Writes len bytes. *queued false: all of them are in the pipe now, no
  // event follows; true: a kWritten event will. An error (EPIPE, EBADF for
  // a stream whose writing ended) means nothing more is written.
  SysError write(uint64_t id, const char* data, size_t len, bool* queued);
  // No more writes (every write completed): a pipe's write end closes, a
  // socket's write side shuts down, a terminal is left as it is.
  SysError shutdown(uint64_t id);
  // Stops waiting for EOF: what the pipe holds now is read and delivered
  // (bounded), then its end. No-op for an id already ended.
  void finish(uint64_t id);
  // Closes our end now: nothing more is read, written, or posted.
  void close(uint64_t id);
  void set_ref(uint64_t id, bool ref);
  // What JavaScript has yet to get of a stream it reads: the bytes in the
  // pipe and in a chunk on its way, and whether the end follows them (every
  // writer is gone, or the end was read and is on its way). A stream that
  // is gone has only its end left to deliver, if that.
  void backlog(uint64_t id, size_t* bytes, bool* end_follows) const;
  bool exists(uint64_t id) const { return streams_.count(id) > 0; }
  size_t open_count() const { return streams_.size(); }

  // Bytes read from one stream per turn of the loop, as libuv reads a
  // stream (a writer faster than us blocks on its full pipe, not our loop).
  static constexpr size_t kChunk = 64 * 1024;
  // finish(): at most this much more is taken from a pipe still being
  // written (by a process outside the tree that was handed it).
  static constexpr size_t kFinishMax = 4 * 1024 * 1024;

 private:
  struct Stream {
    Fd fd;
    Kind kind = kOutput;
    bool reading = false;    // JavaScript wants chunks
    size_t in_flight = 0;    // bytes of the chunk on its way to JavaScript (0: none)
    bool read_ended = false;
    bool write_ended = false;
    bool ref = true;
    bool counted = false;    // counted in the environment's references
    uint32_t events = 0;     // what is in the epoll set now
    std::deque<std::string> queue;  // writes not (wholly) in the pipe yet
    size_t offset = 0;              // of queue.front() already written
  };
  enum class Read { kMore, kDrained, kEnd };
  static bool readable(Kind k) { return k != kWriter; }
  static bool writable(Kind k) { return k == kWriter || k == kDuplex || k == kTerminal; }
  SysError add(Kind kind, Fd fd, uint64_t* id);
  // One read of at most kChunk into a posted chunk.
  Read read_once(uint64_t id, Stream* s, SysError* error);
  void read_end(uint64_t id, Stream* s, const SysError& error);
  // Writes the queue until it is empty or the pipe is full.
  SysError flush_queue(Stream* s);
  void write_ready(uint64_t id, Stream* s);
  // Brings the epoll interest and the loop reference in line with the state.
  void update(uint64_t id, Stream* s);
  void remove(uint64_t id);

  Environment* env_;
  std::unordered_map<uint64_t, Stream> streams_;
  uint64_t next_id_ = 1;
  std::string scratch_;
};

}  // namespace proctree
