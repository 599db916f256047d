"""Terminals through the Python client against a real ``proctree serve``:
``tty`` prints the /dev/pts path the spawn answer named, ``stty size`` follows
``resize()``, ``write()`` types a line that ``read`` gets, ``close_stdin()``
types the end of input, ``foreground()`` names the program in front, and
``run(pty=True)`` returns what the terminal showed. What remains is read from
the kernel (the call's cgroup)."""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
import unittest
from typing import List

from support import cgroup_procs, kill_tokens, live_with, server_command, token

from proctree import Call, ProcTree, ProcTreeError
from proctree.blocking import ProcTree as BlockingProcTree


async def screen_until(call: Call, shown: List[bytes], pattern: str, timeout: float = 5.0) -> str:
    """Reads the terminal into ``shown`` until the text so far matches ``pattern``."""
    assert call.pty is not None

    async def read() -> str:
        while not re.search(pattern, b"".join(shown).decode(errors="replace")):
            chunk = await call.pty.read(4096)  # type: ignore[union-attr]
            if not chunk:
                break
            shown.append(chunk)
        return b"".join(shown).decode(errors="replace")

    return await asyncio.wait_for(read(), timeout)


class TerminalTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.pt = await ProcTree(server_command()).start()

    async def asyncTearDown(self) -> None:
        if self.pt._conn.gone is None:
            self.assertEqual(await self.pt.list(), [], "every call of the test closed")
        await self.pt.close()

    async def test_tty_stty_size_resize_typing_and_the_end_of_input(self) -> None:
        script = 'tty; stty size; read go; stty size; read line; echo "got $line"; cat; echo "cat saw the end"'
        call = await self.pt.spawn(["sh", "-c", script], pty={"cols": 100, "rows": 30})
        self.assertIsNone(call.stdout)
        assert call.terminal is not None
        path = call.terminal["path"]
        assert path is not None
        self.assertRegex(path, r"^/dev/pts/\d+$")
        self.assertEqual((call.terminal["cols"], call.terminal["rows"], call.terminal["term"]), (100, 30, "xterm-256color"))
        shown: List[bytes] = []
        self.assertEqual(await screen_until(call, shown, r"30 100\r\n"), f"{path}\r\n30 100\r\n")
        front = await call.foreground()
        assert front is not None
        self.assertEqual((front["pid"], front["comm"]), (call.pid, "sh"))
        self.assertIn(call.pid, cgroup_procs(call.cgroup))

        await call.resize(120, 40)
        self.assertEqual((call.terminal["cols"], call.terminal["rows"]), (120, 40))
        await call.write("\r")
        await screen_until(call, shown, r"40 120\r\n")
        await call.write("hello there\r")
        await screen_until(call, shown, r"got hello there\r\n")
        await call.write("partial")
        await call.close_stdin()
        self.assertEqual(await call.wait(), 0)
        text = await screen_until(call, shown, r"cat saw the end\r\n$")
        self.assertRegex(text, r"partialpartial.*cat saw the end\r\n$")
        self.assertEqual(cgroup_procs(call.cgroup), [])

    async def test_lines_of_a_terminal_and_errors(self) -> None:
        call = await self.pt.spawn(["sh", "-c", "echo one; echo two >&2; printf three"], pty=True)
        self.assertEqual([line async for line in call.lines()], ["one", "two", "three"])
        await call.wait()
        plain = await self.pt.spawn(["sleep", "5"])
        with self.assertRaises(ProcTreeError) as caught:
            await plain.resize(80, 24)
        self.assertEqual(caught.exception.code, "ERR_PROCTREE_NO_PTY")
        await plain.terminate()
        tty = await self.pt.spawn(["sleep", "5"], pty=True)
        with self.assertRaises(ProcTreeError) as caught:
            await tty.resize(0, 24)
        self.assertEqual(caught.exception.code, "ERR_OUT_OF_RANGE")
        await tty.terminate()
        with self.assertRaises(ValueError):
            await self.pt.spawn(["true"], pty=True, capture=False)

    async def test_run_with_a_terminal_returns_what_it_showed(self) -> None:
        r = await self.pt.run(["sh", "-c", "tty; stty size; [ -t 0 ] && echo on a terminal"], pty={"cols": 40, "rows": 5}, text=True)
        self.assertRegex(r.stdout, r"^/dev/pts/\d+\r\n5 40\r\non a terminal\r\n$")
        self.assertEqual((r.stderr, r.returncode), ("", 0))
        # input is typed (the terminal echoes it), then the end of input.
        typed = await self.pt.run(["sh", "-c", "read a; echo \"got $a\"; cat"], pty=True, input="x y\r", text=True)
        self.assertEqual(typed.stdout, "x y\r\ngot x y\r\n")
        # A daemon that setsid'd away from the terminal is stopped with the rest.
        # (The wait for the file the daemon's shell makes after its setsid():
        # the shell's exit hangs the terminal up, and SIGHUP would end the
        # daemon itself if it had not left the shell's session yet.)
        t = token()
        ready = os.path.join(tempfile.gettempdir(), f"proctree-daemon-{t}")
        try:
            script = f"setsid sh -c ': > {ready}; exec sleep {t}' & while [ ! -e {ready} ]; do sleep 0.01; done; echo started"
            stopped = await self.pt.run(["bash", "-c", script], pty=True, text=True)
            assert stopped.report is not None
            self.assertEqual((stopped.report["reason"], stopped.report["leftovers"]), ("leftovers", []))
            self.assertEqual(live_with(t), [])
        finally:
            kill_tokens([t])
            if os.path.exists(ready):
                os.remove(ready)


class BlockingTerminalTest(unittest.TestCase):
    def test_a_terminal_through_the_blocking_api(self) -> None:
        with BlockingProcTree(server_command()) as pt:
            call = pt.spawn(["sh", "-c", "stty size; read line; echo \"got $line\""], pty=True)
            assert call.pty is not None
            lines = iter(call.pty)
            self.assertEqual(next(lines), b"24 80\r\n")
            call.resize(81, 25)
            call.write("hi\r")
            self.assertEqual(list(lines), [b"hi\r\n", b"got hi\r\n"])
            self.assertEqual(call.wait(5), 0)
            self.assertEqual(pt.run(["stty", "size"], pty={"cols": 33, "rows": 3}, text=True).stdout, "3 33\r\n")


if __name__ == "__main__":
    unittest.main()
