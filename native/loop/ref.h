// Shared ownership of an object between the JavaScript thread and a thread
// of the addon's (a spawner's job, a worker's answers box): each Ref holds
// one count, and whichever lets go last deletes it. T counts in a member
// `std::atomic<int> refs_{1}` (a new object is held once, by the Ref made
// from it) and befriends Ref<T> when that member is private.
// (std::shared_ptr would do, but this libstdc++ makes it read
// __libc_single_threaded, a glibc 2.32 symbol above the addon's ceiling:
// scripts/symbol-ceiling.js.)
#pragma once

#include <atomic>
#include <cstddef>
#include <utility>

namespace proctree {

template <typename T>
class Ref {
 public:
  Ref() = default;
  explicit Ref(T* p) : p_(p) {}  // takes the first reference
  Ref(const Ref& o) : p_(o.p_) {
    if (p_) p_->refs_.fetch_add(1, std::memory_order_relaxed);
  }
  Ref(Ref&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Ref& operator=(Ref o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~Ref() { reset(); }
  void reset() {
    if (p_ && p_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
    p_ = nullptr;
  }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  bool operator==(const Ref& o) const { return p_ == o.p_; }
  bool operator!=(std::nullptr_t) const { return p_ != nullptr; }

 private:
  T* p_ = nullptr;
};

}  // namespace proctree
