"""Limits and pauses through the Python client (protocol 4) against a real
``proctree serve``: ``limits=`` the server cannot enforce raises
``ERR_PROCTREE_LIMITS_UNAVAILABLE`` and runs nothing (a file the command
would have made is not there); the verdicts are on every result;
``call.pause()``/``resume()`` and ``job.pause()``/``resume()`` freeze and
thaw the tree, read from the kernel (``cgroup.events``), asyncio and
blocking alike. (Limits that hold are proved in a VM: test/limits-vm.test.ts.)
"""

from __future__ import annotations

import os
import re
import tempfile
import unittest
from typing import List

from support import kill_tokens, server_command, token

from proctree import ProcTree, ProcTreeError
from proctree.blocking import ProcTree as BlockingProcTree


def frozen(cgroup: str) -> bool:
    with open(os.path.join(cgroup, "cgroup.events")) as f:
        return re.search(r"^frozen 1$", f.read(), re.M) is not None


class LimitsAndPauses(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.tokens: List[str] = []
        self.pt = await ProcTree(server_command()).start()
        caps = await self.pt.capabilities()
        self.tier = caps["tier"]
        self.limits = caps["limits"]

    async def asyncTearDown(self) -> None:
        await self.pt.close(grace=0)
        kill_tokens(self.tokens)

    async def test_limits_it_cannot_enforce_raise_and_run_nothing(self) -> None:
        if self.tier != "cgroup" or self.limits["pids"]:
            self.skipTest(f"this host can enforce pids: {self.limits}")
        marker = os.path.join(tempfile.mkdtemp(prefix="proctree-py-limits-"), "ran")
        with self.assertRaises(ProcTreeError) as ctx:
            await self.pt.run(["sh", "-c", f"touch {marker}"], limits={"pids": 64, "memory_bytes": 256 << 20})
        self.assertEqual(ctx.exception.code, "ERR_PROCTREE_LIMITS_UNAVAILABLE")
        self.assertRegex(ctx.exception.message, r"memory,pids: ")
        self.assertFalse(os.path.exists(marker))

    async def test_a_bad_limit_is_refused_before_it_is_sent(self) -> None:
        with self.assertRaises(ValueError):
            await self.pt.run(["true"], limits={"swap": 1})  # type: ignore[typeddict-unknown-key]
        with self.assertRaises(ProcTreeError) as ctx:
            await self.pt.run(["true"], limits={"pids": 0})
        self.assertEqual(ctx.exception.code, "ERR_PROCTREE_INVALID_REQUEST")

    async def test_every_result_carries_the_verdicts(self) -> None:
        r = await self.pt.run(["true"])
        self.assertIs(r.oom_killed, False)
        self.assertIs(r.pids_limited, False)

    async def test_pause_and_resume_freeze_and_thaw_the_tree(self) -> None:
        if self.tier != "cgroup":
            self.skipTest(f"tier {self.tier}")
        t = token()
        self.tokens.append(t)
        call = await self.pt.spawn(["sh", "-c", f"while :; do :; done # {t}"])
        await call.pause()
        self.assertTrue(call.paused)
        self.assertTrue(frozen(call.cgroup))
        await call.resume()
        self.assertFalse(call.paused)
        self.assertFalse(frozen(call.cgroup))
        await call.pause()
        report = await call.terminate(grace=0)
        self.assertEqual(report["leftovers"], [])
        self.assertFalse(call.paused)
        with self.assertRaises(ProcTreeError) as ctx:
            await call.pause()
        self.assertEqual(ctx.exception.code, "ERR_PROCTREE_UNKNOWN_CALL")



class BlockingPauses(unittest.TestCase):
    def setUp(self) -> None:
        self.tokens: List[str] = []

    def tearDown(self) -> None:
        kill_tokens(self.tokens)

    def test_a_job_pauses_through_the_blocking_api(self) -> None:
        t = token()
        self.tokens.append(t)
        with BlockingProcTree(server_command()) as pt:
            if pt.capabilities()["tier"] != "cgroup":
                self.skipTest("not the cgroup tier")
            call = pt.spawn(["sleep", t], background=True)
            job = pt.job(call.job_id or "")
            self.assertTrue(job.pause())
            self.assertTrue(frozen(call.cgroup))
            self.assertTrue(job.info()["paused"])
            self.assertFalse(job.resume())
            self.assertFalse(frozen(call.cgroup))
            self.assertEqual(job.stop(grace=0)["leftovers"], [])


if __name__ == "__main__":
    unittest.main()
