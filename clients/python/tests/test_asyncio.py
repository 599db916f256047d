"""The asyncio client against a real ``proctree serve``: concurrency,
cancellation (the ladder runs), ``asyncio`` timeouts, the server dying, and
the asyncio.subprocess-like surface.

Outcomes are read from the kernel: the call's cgroup (``cgroup.procs`` of the
path the spawn answer named) and a /proc scan for a token unique to the test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import unittest
from typing import List

from support import cgroup_procs, drained_writer, kill_tokens, live_with, server_command, token, wait_until

import proctree
from proctree import ProcTree, ProcTreeError


async def wait_for_sleeps(t: str, count: int, timeout: float = 5.0) -> List[int]:
    """The ``sleep <t>`` processes themselves, once ``count`` of them run."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        pids = live_with(t, "sleep")
        if len(pids) >= count or loop.time() > deadline:
            return pids
        await asyncio.sleep(0.02)


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.tokens: List[str] = []
        self.pt = await ProcTree(server_command()).start()

    async def asyncTearDown(self) -> None:
        kill_tokens(self.tokens)
        if self.pt._conn.gone is None:
            self.assertEqual(await self.pt.list(), [], "every call of the test closed")
        await self.pt.close()

    def new_token(self) -> str:
        t = token()
        self.tokens.append(t)
        return t

    async def test_run_collects_output_exit_code_and_report(self) -> None:
        r = await self.pt.run(["sh", "-c", "echo out; echo err >&2; exit 7"], text=True)
        self.assertEqual((r.returncode, r.stdout, r.stderr, r.report), (7, "out\n", "err\n", None))
        self.assertIsInstance(r, proctree.Result)
        b = await self.pt.run(["printf", "\\377"])
        self.assertEqual(b.stdout, b"\xff")
        s = await self.pt.run(["sh", "-c", "kill -USR1 $$"])
        self.assertEqual((s.signal, s.returncode), ("SIGUSR1", -signal.SIGUSR1))

    async def test_fifty_concurrent_calls(self) -> None:
        # Each call waits until all 50 have started: they finish only if
        # they really run at the same time. Each also leaves a setsid
        # daemon behind, which must be stopped.
        t = self.new_token()
        with tempfile.TemporaryDirectory() as d:
            script = (
                'touch "$D/$0"; setsid sleep {t} & '
                'for n in $(seq 400); do [ "$(ls "$D" | wc -l)" -ge 50 ] && break; sleep 0.05; done; '
                'echo "$0 $(ls "$D" | wc -l)"'
            ).format(t=t)
            results = await asyncio.gather(
                *(self.pt.run(["bash", "-c", script, str(i)], env={"D": d, "PATH": os.environ["PATH"]}, text=True) for i in range(50))
            )
        self.assertEqual([r.stdout for r in results], [f"{i} 50\n" for i in range(50)])
        for r in results:
            assert r.report is not None
            # (Not "escaped": the last call may exit before its setsid ran.)
            self.assertEqual((r.returncode, r.report["reason"], r.report["leftovers"]), (0, "leftovers", []))
        self.assertEqual(live_with(t), [])

    async def test_cancelling_a_run_stops_its_escaping_tree(self) -> None:
        t = self.new_token()
        task = asyncio.ensure_future(self.pt.run(["bash", "-c", f"setsid sleep {t} & sleep {t}; wait"], grace=2))
        sleeps = await wait_for_sleeps(t, 2)
        self.assertEqual(len(sleeps), 2)
        # The server's answer names the call's cgroup; the kernel says who is in it.
        [listed] = await self.pt.list()
        cgroup = listed["cgroup"]
        self.assertTrue(set(sleeps) <= set(cgroup_procs(cgroup)), "both sleeps, the setsid one too, are in the call's cgroup")
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        # The ladder ran before the cancellation went on: nothing is left, now.
        self.assertEqual(cgroup_procs(cgroup), [])
        self.assertEqual(live_with(t), [])

    async def test_cancelling_a_wait_stops_the_call_and_shield_does_not(self) -> None:
        t = self.new_token()
        call = await self.pt.spawn(["bash", "-c", f"(setsid sleep {t} &); sleep {t}"])
        self.assertTrue(call.cgroup, "the spawn answer names the cgroup")
        sleeps = await wait_for_sleeps(t, 2)
        self.assertTrue(len(sleeps) == 2 and set(sleeps) <= set(cgroup_procs(call.cgroup)))
        # A shielded wait that times out leaves the call alone...
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(call.wait()), 0.2)
        self.assertTrue(set(sleeps) <= set(cgroup_procs(call.cgroup)))
        # ... a cancelled wait stops it.
        waiter = asyncio.ensure_future(call.wait())
        await asyncio.sleep(0.05)
        waiter.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await waiter
        self.assertEqual(cgroup_procs(call.cgroup), [])
        self.assertEqual(live_with(t), [])
        await call.wait()
        assert call.report is not None
        self.assertEqual((call.report["reason"], call.report["escaped"]), ("terminate", 1))

    async def test_a_spawn_cancelled_before_its_answer_is_stopped_once_it_exists(self) -> None:
        t = self.new_token()
        task = asyncio.ensure_future(self.pt.spawn(["bash", "-c", f"setsid sleep {t} & sleep {t}"]))
        await asyncio.sleep(0)  # the request is on its way, the answer not yet here
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task

        async def gone() -> bool:
            return live_with(t) == [] and await self.pt.list() == []

        for _ in range(500):
            if await gone():
                break
            await asyncio.sleep(0.01)
        self.assertTrue(await gone(), "the call the server started anyway was stopped")

    async def test_wait_for_around_run_stops_a_setsid_daemon(self) -> None:
        t = self.new_token()
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(self.pt.run(["bash", "-c", f"setsid sleep {t} & sleep {t}"]), 1)
        self.assertEqual(live_with(t), [])

    @unittest.skipIf(sys.version_info < (3, 11), "asyncio.timeout is Python 3.11+")
    async def test_asyncio_timeout_around_run_stops_a_setsid_daemon(self) -> None:
        t = self.new_token()
        with self.assertRaises(TimeoutError):
            async with asyncio.timeout(1):  # type: ignore[attr-defined]
                await self.pt.run(["bash", "-c", f"setsid sleep {t} & sleep {t}"])
        self.assertEqual(live_with(t), [])

    async def test_the_timeout_option_reports_instead_of_raising(self) -> None:
        t = self.new_token()
        # 3 s: bash must have printed "started" before the timeout, which a
        # loaded machine can delay past half a second.
        r = await self.pt.run(["bash", "-c", f"echo started; setsid sleep {t} & sleep {t}"], timeout=3, grace=1, text=True)
        assert r.report is not None
        self.assertEqual((r.stdout, r.timed_out, r.report["reason"], r.report["leftovers"]), ("started\n", True, "timeout", []))
        self.assertEqual(live_with(t), [])

    async def test_streams_lines_merge_and_communicate(self) -> None:
        # Each piece is taken from its pipe before the next is written, so the
        # merged order is the order of writing (two pipes written back to
        # back can arrive either way round).
        call = await self.pt.spawn(drained_writer([(1, "one\n"), (2, "two\n"), (1, "three\r\nfour")]), merge=True)
        self.assertIsNone(call.stderr)
        self.assertEqual([line async for line in call.lines()], ["one", "two", "three", "four"])
        self.assertEqual(await call.wait(), 0)

        call = await self.pt.spawn(["sh", "-c", "echo a; echo b"])
        assert call.stdout is not None
        self.assertEqual([line async for line in call.stdout], [b"a\n", b"b\n"])
        await call.wait()

        call = await self.pt.spawn(["sh", "-c", "tr a-z A-Z; echo done >&2"], stdin=True)
        self.assertEqual(await call.communicate(b"hello\n"), (b"HELLO\n", b"done\n"))
        self.assertEqual(call.returncode, 0)

        r = await self.pt.run(drained_writer([(1, "1\n"), (2, "2\n"), (1, "3\n")]), merge=True, text=True)
        self.assertEqual((r.stdout, r.stderr), ("1\n2\n3\n", ""))
        r = await self.pt.run(["tr", "a-z", "A-Z"], input="abc", text=True)
        self.assertEqual(r.stdout, "ABC")

    async def test_long_lines_come_in_pieces_of_the_limit(self) -> None:
        call = await self.pt.spawn(["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x; echo; echo short"], limit=100_000)
        lines = [line async for line in call.lines()]
        self.assertEqual("".join(lines[:-1]), "x" * 300_000)
        self.assertTrue(all(len(piece) <= 100_000 for piece in lines))
        self.assertEqual(lines[-1], "short")
        await call.wait()

    async def test_kill_terminate_and_the_call_as_a_context(self) -> None:
        t = self.new_token()
        call = await self.pt.spawn(["sleep", t])
        self.assertTrue(await call.kill("SIGKILL"))
        self.assertEqual(await call.wait(), -signal.SIGKILL)
        self.assertFalse(await call.kill())

        async with await self.pt.spawn(["bash", "-c", f"nohup sleep {t} >/dev/null 2>&1 & sleep {t}"]) as call:
            self.assertEqual(len(await wait_for_sleeps(t, 2)), 2)
            cgroup = call.cgroup
        self.assertTrue(call.closed)
        self.assertEqual(cgroup_procs(cgroup), [])
        self.assertEqual(live_with(t), [])

        call = await self.pt.spawn(["bash", "-c", f"trap '' TERM; setsid sleep {t} & sleep {t}; wait"])
        self.assertEqual(len(await wait_for_sleeps(t, 2)), 2)
        report = await call.terminate(grace=0.3)
        self.assertEqual(report["leftovers"], [])
        self.assertEqual(live_with(t), [])

    async def test_max_output_keeps_head_tail_or_both_without_splitting_characters(self) -> None:
        # 3000 two-byte characters, then a marker line.
        script = "python3 -c \"import sys; sys.stdout.write('é' * 3000 + '\\nEND\\n')\""
        total = 3000 * 2 + 5
        head = await self.pt.run(["sh", "-c", script], max_output=1001, text=True)
        self.assertEqual((head.stdout, head.stdout_omitted), ("é" * 500, total - 1000))
        tail = await self.pt.run(["sh", "-c", script], max_output=1002, keep="tail", text=True)
        self.assertEqual((tail.stdout, tail.stdout_omitted), ("é" * 498 + "\nEND\n", total - 1001))
        # 10 bytes of head, 10 of tail, of which one byte is half an "é".
        both = await self.pt.run(["sh", "-c", script], max_output=20, keep="both", marker="[{omitted} bytes omitted]", text=True)
        self.assertEqual(both.stdout_omitted, total - 19)
        self.assertEqual(both.stdout, "é" * 5 + f"[{total - 19} bytes omitted]" + "éé\nEND\n")
        with self.assertRaises(ValueError):
            await self.pt.run(["true"], keep="middle")  # type: ignore[call-overload]

    async def test_errors_from_the_server_keep_their_code(self) -> None:
        with self.assertRaises(ProcTreeError) as caught:
            await self.pt.spawn(["proctree-no-such-command-xyz"])
        self.assertEqual(caught.exception.code, "ENOENT")
        with self.assertRaises(ProcTreeError) as caught:
            await self.pt.run(["true"], confinement="no-such-tier")
        self.assertEqual(caught.exception.code, "ERR_INVALID_ARG_VALUE")


class ServerDeathTest(unittest.IsolatedAsyncioTestCase):
    async def test_every_pending_awaitable_fails_with_eserver_and_the_calls_are_gone(self) -> None:
        t = token()
        pt = await ProcTree(server_command()).start()
        try:
            call = await pt.spawn(["bash", "-c", f"(setsid sleep {t} &); sleep {t}"])
            running = asyncio.ensure_future(pt.run(["bash", "-c", f"setsid sleep {t} & sleep {t}"]))
            self.assertEqual(len(await wait_for_sleeps(t, 4)), 4)
            assert call.stdout is not None
            pending = [asyncio.ensure_future(call.wait()), running, asyncio.ensure_future(call.stdout.read())]
            await asyncio.sleep(0.05)
            os.kill(pt.server_pid, signal.SIGKILL)
            outcomes = await asyncio.gather(*pending, return_exceptions=True)
            for outcome in outcomes:
                self.assertIsInstance(outcome, ProcTreeError)
                assert isinstance(outcome, ProcTreeError)
                self.assertEqual(outcome.code, "ESERVER")
                self.assertIn("exited", outcome.message)
            with self.assertRaises(ProcTreeError) as caught:
                await pt.run(["true"])
            self.assertEqual(caught.exception.code, "ESERVER")
            # The server's guardian stopped its calls: the kernel agrees.
            self.assertTrue(wait_until(lambda: live_with(t) == [], 5), "the calls died with their server")
            # A killed process leaves cgroup.procs a moment after its cmdline is gone.
            self.assertTrue(wait_until(lambda: cgroup_procs(call.cgroup) == [], 5), cgroup_procs(call.cgroup))
        finally:
            await pt.close()
            kill_tokens([t])


if __name__ == "__main__":
    unittest.main()
