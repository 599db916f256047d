"""What a call listens on, through the Python client against a real
``proctree serve`` (protocol 3): ``run(..., background=True, ready=...)``
returns once the server listens, with ``result.ready``; ``call.ports()``,
``job.ports()`` and ``jobs()`` agree; ``ready["timeout"]`` stops a tree that
never listens (reason ``not-ready``) and nothing is left.

Outcomes are read from the kernel: a /proc scan for a token unique to the
test, the call's cgroup, a real TCP connection.
"""

from __future__ import annotations

import asyncio
import re
import socket
import unittest
from typing import List

from support import cgroup_procs, kill_tokens, live_with, server_command, token

from proctree import ProcTree
from proctree.blocking import ProcTree as BlockingProcTree

SERVER = """
import socket, sys, time
time.sleep(0.3)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 0)); s.listen()
print('up', s.getsockname()[1], flush=True)
time.sleep(float(sys.argv[1]))
"""


def connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return True
    except OSError:
        return False


class PortsTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.tokens: List[str] = []
        self.pt = await ProcTree(server_command()).start()

    async def asyncTearDown(self) -> None:
        kill_tokens(self.tokens)
        await self.pt.close()

    async def test_run_returns_once_the_server_listens_and_ports_agree(self) -> None:
        t = token()
        self.tokens.append(t)
        r = await self.pt.run(
            ["python3", "-c", SERVER, t], background=True, text=True, ready={"listening": True, "output": re.compile(r"up \d+"), "timeout": 20}
        )
        assert r.ready is not None and r.job_id is not None
        [pid] = live_with(t, "python3")
        [listener] = r.ready["listening"]
        self.assertEqual(listener, {"protocol": "tcp", "address": "127.0.0.1", "port": listener["port"], "pid": pid})
        self.assertEqual(r.ready.get("output"), f"up {listener['port']}")
        self.assertGreater(r.ready["after"], 0)
        self.assertTrue(connects(listener["port"]))
        job = self.pt.job(r.job_id)
        self.assertEqual(await job.ports(), [listener])
        [listed] = [j for j in await self.pt.jobs() if j["id"] == r.job_id]
        self.assertEqual(listed.get("ports"), [listener])
        await job.stop()
        self.assertEqual(await job.ports(), [])
        self.assertEqual(live_with(t), [])

    async def test_call_ports_of_a_spawned_server(self) -> None:
        t = token()
        self.tokens.append(t)
        call = await self.pt.spawn(["python3", "-c", SERVER, t], background=True, ready={"listening": True})
        for _ in range(500):
            if call.ready is not None:
                break
            await asyncio.sleep(0.02)
        assert call.ready is not None
        self.assertEqual(await call.ports(), call.ready["listening"])
        await call.terminate()
        self.assertEqual(live_with(t), [])

    async def test_ready_timeout_stops_the_tree_with_nothing_left(self) -> None:
        t = token()
        self.tokens.append(t)
        r = await self.pt.run(["bash", "-c", f"setsid sleep {t} & sleep {t}"], background=True, ready={"listening": True, "timeout": 0.3})
        self.assertIsNone(r.ready)
        assert r.report is not None
        self.assertEqual((r.report["reason"], r.report["leftovers"]), ("not-ready", []))
        self.assertEqual(live_with(t), [])
        self.assertEqual(cgroup_procs(r.cgroup), [])


class BlockingPortsTest(unittest.TestCase):
    def test_ready_through_the_blocking_api(self) -> None:
        t = token()
        try:
            with BlockingProcTree(server_command()) as pt:
                r = pt.run(["python3", "-c", SERVER, t], background=True, ready={"listening": True, "timeout": 20})
                assert r.ready is not None and r.job_id is not None
                port = r.ready["listening"][0]["port"]
                self.assertTrue(connects(port))
                self.assertEqual([p["port"] for p in pt.job(r.job_id).ports()], [port])
                pt.job(r.job_id).stop()
            self.assertEqual(live_with(t), [])
        finally:
            kill_tokens([t])


if __name__ == "__main__":
    unittest.main()
