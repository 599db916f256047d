"""The Python client against a real ``proctree serve``: escapes leave nothing,
and a client killed with SIGKILL takes its calls with it within a second.

Survivors are found by a /proc scan for a token unique to each test in the
command line (``sleep 300.<random>``), never from the client's bookkeeping.

Run with ``python3 -m unittest discover -s clients/python -v``. The server is
``PROCTREE_SERVER`` when set, else this checkout's ``node bin/proctree.js serve``.
"""

import os
import random
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import unittest
from pathlib import Path
from typing import Callable, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from proctree_client import ProcTree, ProcTreeError  # noqa: E402

REPO = HERE.parent.parent


def server_command() -> List[str]:
    configured = os.environ.get("PROCTREE_SERVER", "").strip()
    if configured:
        return shlex.split(configured)
    return ["node", str(REPO / "bin" / "proctree.js"), "serve"]


def token(seconds: int = 300) -> str:
    return f"{seconds}.{random.randrange(1 << 32)}"


def live_with(needle: str, comm: str = "") -> List[int]:
    """Live (non-zombie) processes whose command line contains ``needle``;
    with ``comm``, only those already running that program (a shell whose
    script names the token, or ``setsid`` before it execs, do not count)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            if needle not in cmdline:
                continue
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            if stat[stat.rindex(")") + 2] != "Z" and (not comm or name == comm):
                found.append(int(entry))
        except (OSError, ValueError):
            continue  # gone while we looked
    return found


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


class ClientTest(unittest.TestCase):
    pt: ProcTree

    @classmethod
    def setUpClass(cls) -> None:
        cls.pt = ProcTree(server_command())

    @classmethod
    def tearDownClass(cls) -> None:
        cls.pt.close()

    def setUp(self) -> None:
        self.tokens: List[str] = []

    def tearDown(self) -> None:
        # A failed test must not leave its processes running: kill what
        # carries this test's tokens, by pid.
        for t in self.tokens:
            for pid in live_with(t):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.assertTrue(wait_until(lambda: self.pt.list() == [], 5), "every call of the test closed")

    def new_token(self) -> str:
        t = token()
        self.tokens.append(t)
        return t

    def test_run_collects_output_and_exit_code(self) -> None:
        r = self.pt.run(["sh", "-c", "echo out; echo err >&2; exit 7"], text=True)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (7, "out\n", "err\n"))
        self.assertIsNone(r.report)

    def test_run_reports_the_signal_like_subprocess(self) -> None:
        r = self.pt.run(["sh", "-c", "kill -USR1 $$"])
        self.assertEqual(r.signal, "SIGUSR1")
        self.assertEqual(r.returncode, -signal.SIGUSR1)

    def test_input_and_stdout_iteration(self) -> None:
        call = self.pt.spawn(["sh", "-c", "echo one; read x; echo got $x"], stdin=True)
        lines = iter(call.stdout)
        self.assertEqual(next(lines), b"one\n")
        call.write("two\n")
        call.close_stdin()
        self.assertEqual(list(lines), [b"got two\n"])
        self.assertEqual(call.wait(5), 0)

    def test_a_command_that_does_not_exist(self) -> None:
        with self.assertRaises(ProcTreeError) as caught:
            self.pt.spawn(["proctree-no-such-command-xyz"])
        self.assertEqual(caught.exception.code, "ENOENT")

    def test_bad_options_are_refused_with_a_code(self) -> None:
        with self.assertRaises(ProcTreeError) as caught:
            self.pt.spawn(["true"], leftovers="sometimes")
        self.assertEqual(caught.exception.code, "ERR_PROCTREE_INVALID_REQUEST")
        # Tiers are the library's to validate.
        with self.assertRaises(ProcTreeError) as caught:
            self.pt.spawn(["true"], confinement="no-such-tier")
        self.assertEqual(caught.exception.code, "ERR_INVALID_ARG_VALUE")

    def test_timeout_stops_the_whole_tree(self) -> None:
        t = self.new_token()
        r = self.pt.run(["bash", "-c", f"(setsid sleep {t} &); sleep {t}"], timeout=0.5, grace=1)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.report["reason"], "timeout")
        self.assertEqual(r.report["leftovers"], [])
        self.assertEqual(live_with(t), [])

    def test_double_fork_setsid_leaves_zero_survivors(self) -> None:
        t = self.new_token()
        call = self.pt.spawn(["bash", "-c", f"(setsid sleep {t} &) ; sleep {t}"])
        self.assertTrue(wait_until(lambda: len(live_with(t, "sleep")) >= 2, 5), "both sleeps started")
        report = call.terminate(grace=1)
        self.assertEqual(report["escaped"], 1)
        self.assertEqual(report["leftovers"], [])
        self.assertEqual(live_with(t), [])

    def test_nohup_disown_leaves_zero_survivors(self) -> None:
        t = self.new_token()
        script = f"nohup sleep {t} >/dev/null 2>&1 & disown; sleep {t}"
        call = self.pt.spawn(["bash", "-c", script])
        self.assertTrue(wait_until(lambda: len(live_with(t, "sleep")) >= 2, 5), "both sleeps started")
        report = call.terminate(grace=1)
        self.assertEqual(report["leftovers"], [])
        self.assertEqual(live_with(t), [])

    def test_daemon_left_when_the_main_process_exits_is_killed(self) -> None:
        t = self.new_token()
        r = self.pt.run(["bash", "-c", f"setsid sleep {t} & disown; exit 0"], grace=1)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.report["reason"], "leftovers")
        self.assertEqual(live_with(t), [])


class ClientDeathTest(unittest.TestCase):
    """A harness killed with SIGKILL runs no cleanup of its own: the server must."""

    def test_sigkill_of_the_client_ends_all_its_calls_within_1s(self) -> None:
        t = token()
        harness = textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(HERE)!r})
            from proctree_client import ProcTree
            pt = ProcTree({server_command()!r})
            calls = [
                pt.spawn(["bash", "-c", "(setsid sleep {t} &) ; sleep {t}"], grace=0.3),
                pt.spawn(["bash", "-c", "nohup sleep {t} >/dev/null 2>&1 & disown; sleep {t}"], grace=0.3),
                pt.spawn(["bash", "-c", "trap '' TERM; setsid sleep {t} & sleep {t}; wait"], grace=0.3),
            ]
            print(pt.server_pid, flush=True)
            time.sleep(300)
            """
        )
        child = subprocess.Popen([sys.executable, "-c", harness], stdout=subprocess.PIPE, text=True)
        try:
            server_pid = int(child.stdout.readline())
            self.assertTrue(wait_until(lambda: len(live_with(t, "sleep")) >= 6, 5), "all six sleeps started")
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            killed_at = time.monotonic()
            self.assertTrue(wait_until(lambda: live_with(t) == [], 5))
            self.assertLess(time.monotonic() - killed_at, 1.0)
            # And the server itself went away, leaving nothing.
            self.assertTrue(wait_until(lambda: not os.path.exists(f"/proc/{server_pid}/cmdline") or _zombie(server_pid), 5))
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
            for pid in live_with(t):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2] == "Z"
    except OSError:
        return True


if __name__ == "__main__":
    unittest.main()
