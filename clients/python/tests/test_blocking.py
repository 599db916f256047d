"""The blocking API (``proctree.blocking``, under its first name
``proctree_client``) against a real ``proctree serve``: escapes leave
nothing, and a client killed with SIGKILL takes its calls with it within a
second.

Survivors are found by a /proc scan for a token unique to each test in the
command line (``sleep 300.<random>``), never from the client's bookkeeping.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import unittest
from typing import List

from support import CLIENT, kill_tokens, live_with, server_command, token, wait_until, zombie_or_gone

from proctree_client import ProcTree, ProcTreeError  # noqa: E402


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
        # A failed test must not leave its processes running.
        kill_tokens(self.tokens)
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


class InterruptTest(unittest.TestCase):
    def test_ctrl_c_during_a_blocking_run_stops_the_tree_before_keyboardinterrupt_goes_on(self) -> None:
        t = token()
        harness = textwrap.dedent(
            f"""
            import json, sys
            sys.path.insert(0, {str(CLIENT)!r})
            sys.path.insert(0, {str(CLIENT / "tests")!r})
            from support import live_with
            from proctree.blocking import ProcTree
            with ProcTree({server_command()!r}) as pt:
                try:
                    pt.run(["bash", "-c", "setsid sleep {t} & sleep {t}; wait"])
                except KeyboardInterrupt:
                    # The server still runs: what is gone was stopped by the ladder.
                    print(json.dumps({{"open": pt.list(), "alive": live_with({t!r})}}), flush=True)
            """
        )
        child = subprocess.Popen([sys.executable, "-c", harness], stdout=subprocess.PIPE, text=True)
        try:
            self.assertTrue(wait_until(lambda: len(live_with(t, "sleep")) >= 2, 10), "both sleeps started")
            os.kill(child.pid, signal.SIGINT)
            out, _ = child.communicate(timeout=30)
            self.assertEqual(child.returncode, 0)
            self.assertEqual(json.loads(out), {"open": [], "alive": []})
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            kill_tokens([t])


class ClientDeathTest(unittest.TestCase):
    """A harness killed with SIGKILL runs no cleanup of its own: the server must."""

    def test_sigkill_of_the_client_ends_all_its_calls_within_1s(self) -> None:
        t = token()
        harness = textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(CLIENT)!r})
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
            self.assertTrue(wait_until(lambda: zombie_or_gone(server_pid), 5))
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
            kill_tokens([t])


if __name__ == "__main__":
    unittest.main()
