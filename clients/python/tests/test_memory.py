"""Bounded memory end to end, measured by the kernel (VmHWM in /proc/<pid>/status).

A fresh Python process (so its peak is this workload's alone) runs 200 MB of
output through ``run(max_output=1 MB, keep='both')``, which the server keeps
for it (only the kept megabyte travels), then, with a server of its own,
100 MB through a ``spawn()`` whose stdout it does not read for a while: the
client keeps at most its budget, and the server, whose reader is slow or
paused, applies backpressure instead of buffering. Each server's peak is
that of its workload alone: one that reads 200 MB at full speed still holds,
for a while, the pipe reads V8 has not collected yet (tens of MB), which
would count against the next workload.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import unittest

from support import CLIENT, server_command

LIMIT_KIB = 100 * 1024

PROGRAM = textwrap.dedent(
    """
    import asyncio, json, os, sys
    sys.path.insert(0, {client!r})
    sys.path.insert(0, {tests!r})
    from support import peak_rss_kib
    from proctree import ProcTree

    async def main():
        async with ProcTree({server!r}) as pt:
            r = await pt.run(["head", "-c", "200000000", "/dev/zero"], max_output=1_000_000, keep="both")
            ran = {{"kept": len(r.stdout), "omitted": r.stdout_omitted, "returncode": r.returncode}}
            collecting = peak_rss_kib(pt.server_pid)
        async with ProcTree({server!r}) as pt:
            call = await pt.spawn(["head", "-c", "100000000", "/dev/zero"])
            await asyncio.sleep(1.5)  # nobody reads: the server must pause the call, not buffer it
            total = 0
            while True:
                chunk = await call.stdout.read(1 << 16)
                if not chunk:
                    break
                total += len(chunk)
            await call.wait()
            streaming = peak_rss_kib(pt.server_pid)
        print(json.dumps({{"run": ran, "streamed": total, "client_kib": peak_rss_kib(os.getpid()), "server_kib": [collecting, streaming]}}))

    asyncio.run(main())
    """
)


class MemoryTest(unittest.TestCase):
    def test_200mb_with_max_output_keeps_client_and_server_under_100mb(self) -> None:
        program = PROGRAM.format(client=str(CLIENT), tests=str(CLIENT / "tests"), server=server_command())
        done = subprocess.run([sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240, check=False)
        self.assertEqual(done.returncode, 0, done.stderr.decode(errors="replace"))
        measured = json.loads(done.stdout)
        collecting, streaming = measured["server_kib"]
        print(
            f"\n  peak RSS: client {measured['client_kib'] // 1024} MiB, server {collecting // 1024} MiB (run) and {streaming // 1024} MiB (spawn)",
            file=sys.stderr,
        )
        self.assertEqual(measured["run"], {"kept": 1_000_000, "omitted": 199_000_000, "returncode": 0})
        self.assertEqual(measured["streamed"], 100_000_000, "nothing lost while paused")
        self.assertLess(measured["client_kib"], LIMIT_KIB)
        self.assertLess(collecting, LIMIT_KIB)
        self.assertLess(streaming, LIMIT_KIB)


if __name__ == "__main__":
    unittest.main()
