// A few macros for the native unit tests: each test file is one executable
// that ctest runs. No framework to install, and nothing that needs exceptions.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace check {

struct Case {
  const char* name;
  void (*fn)();
};

inline std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

struct State {
  bool failed = false;
  bool skipped = false;
  std::string skip_reason;
};

inline State& current() {
  static State s;
  return s;
}

struct Register {
  Register(const char* name, void (*fn)()) { cases().push_back({name, fn}); }
};

template <typename T>
std::string show(const T& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}
inline std::string show(const std::string& v) { return "\"" + v + "\""; }
inline std::string show(const char* v) { return v ? "\"" + std::string(v) + "\"" : "(null)"; }

inline void fail(const char* file, int line, const std::string& what) {
  std::printf("  %s:%d: %s\n", file, line, what.c_str());
  current().failed = true;
}

inline int run_all() {
  int passed = 0, failed = 0, skipped = 0;
  for (const Case& c : cases()) {
    current() = State{};
    c.fn();
    if (current().failed) {
      ++failed;
      std::printf("FAIL %s\n", c.name);
    } else if (current().skipped) {
      ++skipped;
      std::printf("skip %s: %s\n", c.name, current().skip_reason.c_str());
    } else {
      ++passed;
      std::printf("ok   %s\n", c.name);
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed == 0 ? 0 : 1;
}

}  // namespace check

#define TEST(name)                                           \
  static void name();                                        \
  static const check::Register name##_registered(#name, name); \
  static void name()

// Each CHECK ends the test on failure (returns from the test function).
#define CHECK(cond)                                   \
  do {                                                \
    if (!(cond)) {                                    \
      check::fail(__FILE__, __LINE__, "CHECK(" #cond ")"); \
      return;                                         \
    }                                                 \
  } while (0)

#define CHECK_EQ(a, b)                                                                        \
  do {                                                                                        \
    const auto& check_a_ = (a);                                                               \
    const auto& check_b_ = (b);                                                               \
    if (!(check_a_ == check_b_)) {                                                            \
      check::fail(__FILE__, __LINE__,                                                         \
                  "CHECK_EQ(" #a ", " #b "): " + check::show(check_a_) + " != " + check::show(check_b_)); \
      return;                                                                                 \
    }                                                                                         \
  } while (0)

#define SKIP(reason)                   \
  do {                                 \
    check::current().skipped = true;   \
    check::current().skip_reason = (reason); \
    return;                            \
  } while (0)

#define CHECK_MAIN() \
  int main() { return check::run_all(); }
