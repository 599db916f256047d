"""Sealed calls through the Python client against a real ``proctree serve``:
``seal=True`` runs the call in namespaces of its own (its cgroup namespace is
rooted at its leaf, it sees no process of the server's, and from outside it
sits one PID namespace below), and where the server cannot seal the call it
raises ``ERR_PROCTREE_SEAL_UNAVAILABLE`` and runs nothing. Both clients.
"""

from __future__ import annotations

import os
import tempfile
import unittest

from support import server_command

from proctree import ProcTree, ProcTreeError
from proctree.blocking import ProcTree as BlockingProcTree

SCRIPT = "grep -x '0::/' /proc/self/cgroup; [ -e /proc/$SERVER_PID ] && echo server-visible || echo server-invisible"


class Sealed(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.pt = await ProcTree(server_command()).start()
        self.seal = (await self.pt.capabilities())["seal"]

    async def asyncTearDown(self) -> None:
        await self.pt.close(grace=0)

    async def test_a_sealed_call_sees_its_own_cgroup_and_no_process_of_the_server(self) -> None:
        if not self.seal["available"]:
            self.skipTest(f"no sealing here: {self.seal.get('why')}")
        call = await self.pt.spawn(["sh", "-c", f"{SCRIPT}; exec sleep 30"], seal=True,
                                   env={**os.environ, "SERVER_PID": str(os.getpid())})
        try:
            with open(f"/proc/{call.pid}/status") as f:
                nspid = [line.split()[1:] for line in f if line.startswith("NSpid:")][0]
            self.assertEqual(len(nspid), 2)
            line1 = await call.stdout.readline()
            line2 = await call.stdout.readline()
            self.assertEqual(line1, b"0::/\n")
            self.assertEqual(line2, b"server-invisible\n")
        finally:
            await call.terminate()

    async def test_where_it_cannot_seal_nothing_runs(self) -> None:
        marker = os.path.join(tempfile.mkdtemp(prefix="proctree-py-seal-"), "ran")
        with self.assertRaises(ProcTreeError) as ctx:
            await self.pt.run(["sh", "-c", f"touch {marker}"], seal=True, confinement="pgroup")
        self.assertEqual(ctx.exception.code, "ERR_PROCTREE_SEAL_UNAVAILABLE")
        self.assertFalse(os.path.exists(marker))


class SealedBlocking(unittest.TestCase):
    def test_run_sealed(self) -> None:
        with BlockingProcTree(server_command()) as pt:
            seal = pt.capabilities()["seal"]
            if not seal["available"]:
                self.skipTest(f"no sealing here: {seal.get('why')}")
            r = pt.run(["sh", "-c", "grep -x '0::/' /proc/self/cgroup; exit 7"], seal=True, text=True)
            self.assertEqual(r.exit_code, 7)
            self.assertEqual(r.stdout, "0::/\n")


if __name__ == "__main__":
    unittest.main()
