// A few macros for the native unit tests: each test file is one executable
// that ctest runs. No framework to install, and nothing that needs exceptions.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// A scenario runs in a fresh copy of the test executable (re-exec'd with
// `--scenario <name>`, see fixtures::run_scenario), for what a forked copy
// cannot test: settings read once per process (PROCTREE_TEST_* variables,
// close_range and cgroup.kill detection) that an earlier test may have
// cached already. Its return value is the process's exit status.
struct Scenario {
  const char* name;
  int (*fn)();
};

inline std::vector<Scenario>& scenarios() {
  static std::vector<Scenario> all;
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

struct RegisterScenario {
  RegisterScenario(const char* name, int (*fn)()) { scenarios().push_back({name, fn}); }
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

// filter: run only the tests whose name contains it (nullptr: all).
inline int run_all(const char* filter = nullptr) {
  int passed = 0, failed = 0, skipped = 0;
  for (const Case& c : cases()) {
    if (filter && !std::strstr(c.name, filter)) continue;
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

inline int run_scenario(const char* name) {
  for (const Scenario& s : scenarios()) {
    if (std::strcmp(s.name, name) == 0) {
      int rc = s.fn();
      std::fflush(stdout);
      return rc;
    }
  }
  std::printf("no scenario %s\n", name);
  return 99;
}

inline int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--scenario") == 0) return run_scenario(argv[2]);
  return run_all(argc >= 2 ? argv[1] : nullptr);
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

// A scenario: int-returning, 0 = passed; see check::Scenario.
#define SCENARIO(name)                                                  \
  static int name##_scenario();                                         \
  static const check::RegisterScenario name##_scenario_registered(#name, name##_scenario); \
  static int name##_scenario()

#define SKIP(reason)                   \
  do {                                 \
    check::current().skipped = true;   \
    check::current().skip_reason = (reason); \
    return;                            \
  } while (0)

// `<test> [name-part]` runs the tests whose name contains name-part;
// `<test> --scenario <name>` runs one scenario.
#define CHECK_MAIN() \
  int main(int argc, char** argv) { return check::main(argc, argv); }
