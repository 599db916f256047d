// Runs an Environment's turns as the binding does, without a JavaScript
// runtime: the Waiter thread's wake() writes an eventfd this thread waits on,
// then turn() runs here; deliver_later() is a flag served before waiting.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <functional>

#include "kernel/fd.h"
#include "loop/environment.h"
#include "loop/timers.h"

struct TestLoop : proctree::LoopHost {
  proctree::Fd woken{eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  proctree::Environment* env = nullptr;
  bool deliver = false;
  bool alive = false;  // what keep_alive() said last

  void wake() override {
    uint64_t one = 1;
    if (write(woken.get(), &one, sizeof one) < 0) return;
  }
  void deliver_later() override { deliver = true; }
  void keep_alive(bool a) override { alive = a; }

  // One step: a delivery due, else a turn if the Waiter wakes us within ms.
  void step(int ms) {
    if (deliver) {
      deliver = false;
      env->deliver_next();
      return;
    }
    pollfd p{woken.get(), POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return;
    uint64_t n;
    if (read(woken.get(), &n, sizeof n) == sizeof n) env->turn();
  }

  static uint64_t now_ms() { return proctree::monotonic_ns() / 1000000ULL; }

  // As a runtime's loop: while the environment keeps it alive (or a delivery
  // is due). False if that took longer than timeout_ms.
  bool run(uint64_t timeout_ms = 15000) {
    const uint64_t deadline = now_ms() + timeout_ms;
    while (alive || deliver) {
      if (now_ms() > deadline) return false;
      step(10);
    }
    return true;
  }
  // Until done() holds (checked every 2 ms at most), or timeout_ms.
  bool run_until(const std::function<bool()>& done, uint64_t timeout_ms = 10000) {
    const uint64_t deadline = now_ms() + timeout_ms;
    while (!done()) {
      if (now_ms() > deadline) return false;
      step(2);
    }
    return true;
  }
  // For ms, whatever keeps the loop alive (unreferenced timers run too).
  void run_for(uint64_t ms) {
    const uint64_t deadline = now_ms() + ms;
    while (now_ms() < deadline) step(static_cast<int>(deadline - now_ms()) + 1);
  }
};
