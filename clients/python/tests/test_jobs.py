"""Jobs through the Python client against a real ``proctree serve``: a dev
server left behind by ``cmd &`` (``leftovers='keep'``) or started with
``background=True`` answers HTTP after ``run()`` returned, is listed, its
output readable, and ``job(id).stop()`` leaves nothing; waiting on a job and
being cancelled leaves it alone; the client dying (SIGKILL) takes its jobs
with it.

Outcomes are read from the kernel: the call's cgroup (``cgroup.procs``), a
/proc scan for a token unique to the test, a real HTTP request.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest
import urllib.request
from pathlib import Path
from typing import List, Tuple

from support import CLIENT, cgroup_procs, kill_tokens, live_with, server_command, token, wait_until, zombie_or_gone

import proctree
from proctree import ProcTree, ProcTreeError
from proctree.blocking import ProcTree as BlockingProcTree


def serving_dir(tokens: List[str]) -> Tuple[str, str]:
    """A directory named by a unique token (the HTTP server's command line shows it), with one file."""
    needle = f"proctree-py-job-{token()}"
    path = Path(tempfile.gettempdir()) / needle
    path.mkdir()
    (path / "hello.txt").write_text("hello from the job\n")
    tokens.append(needle)
    return str(path), needle


def http_server(directory: str) -> str:
    return f"python3 -u -m http.server --bind 127.0.0.1 --directory {directory} 0"


def get(port: int, name: str) -> Tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{name}", timeout=5) as res:
        return res.status, res.read().decode()


async def port_of(job: proctree.Job) -> int:
    """The port the job's HTTP server says it serves on, read from the job's output."""
    for _ in range(500):
        m = re.search(r"Serving HTTP on 127\.0\.0\.1 port (\d+)", (await job.read())["text"])
        if m:
            return int(m.group(1))
        await asyncio.sleep(0.02)
    raise AssertionError(f"job {job.id} never said its port: {(await job.read())['text']!r}")


class JobsTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.tokens: List[str] = []
        self.pt = await ProcTree(server_command()).start()

    async def asyncTearDown(self) -> None:
        kill_tokens(self.tokens)
        for t in self.tokens:
            if t.startswith("proctree-py-job-"):
                shutil.rmtree(Path(tempfile.gettempdir()) / t, ignore_errors=True)
        if self.pt._conn.gone is None:
            self.assertEqual(await self.pt.list(), [], "every call of the test closed")
        await self.pt.close()

    async def test_a_dev_server_kept_as_a_job_answers_after_run_is_listed_readable_and_stopped(self) -> None:
        directory, needle = serving_dir(self.tokens)
        r = await self.pt.run(["bash", "-c", f"{http_server(directory)} & echo started"], leftovers="keep", text=True)
        # run() returned with the shell's own status and output; the server runs on.
        self.assertEqual((r.returncode, r.stdout, r.report), (0, "started\n", None))
        assert r.job_id is not None
        self.assertRegex(r.job_id, r"^c\d+$")
        self.assertEqual(os.path.basename(r.cgroup), r.job_id)
        self.assertGreaterEqual(len(r.remaining), 1)
        assert r.usage is not None
        self.assertEqual(r.usage["source"], "cgroup")
        job = self.pt.job(r.job_id)
        port = await port_of(job)
        # The kernel's view: the serving process is in the job's cgroup.
        serving = live_with(needle)
        self.assertTrue(serving and set(serving) <= set(cgroup_procs(r.cgroup)))
        loop = asyncio.get_running_loop()
        self.assertEqual(await loop.run_in_executor(None, get, port, "hello.txt"), (200, "hello from the job\n"))

        [listed] = [j for j in await self.pt.jobs() if j["id"] == r.job_id]
        self.assertEqual(listed["state"], "running")
        self.assertIn("python3 -u -m http.server", listed["command"])
        self.assertEqual(sorted(p["pid"] for p in listed["processes"]), sorted(cgroup_procs(r.cgroup)))
        self.assertEqual((await job.info())["id"], r.job_id)
        # Its recent output: the request it logged (stderr), merged in; read on from an offset.
        for _ in range(250):
            if "GET /hello.txt" in (await job.tail(300))["text"]:
                break
            await asyncio.sleep(0.02)
        tail = await job.tail(300)
        self.assertIn('"GET /hello.txt HTTP/1.1" 200', tail["text"])
        self.assertEqual(tail["next"], tail["total"])
        first = await job.read(max_bytes=8)
        self.assertEqual((first["text"], first["from"], first["next"]), ("started\n", 0, 8))
        self.assertTrue((await job.read(first["next"]))["text"].startswith("Serving HTTP"))

        report = await job.stop(grace=2)
        self.assertEqual((report["reason"], report["leftovers"], report["verified"]), ("terminate", [], "cgroup.events"))
        final = await job.wait()
        self.assertEqual((final["state"], final["members"]), ("stopped", 0))
        self.assertEqual(cgroup_procs(r.cgroup), [])
        self.assertEqual(live_with(needle), [])

    async def test_a_background_dev_server_survives_run_and_job_stop_ends_it(self) -> None:
        directory, needle = serving_dir(self.tokens)
        r = await self.pt.run(["bash", "-c", http_server(directory)], background=True, text=True)
        # It returned at once: the call is the job, still running.
        assert r.job_id is not None
        self.assertEqual((r.returncode, r.stdout, r.remaining), (None, "", []))
        job = self.pt.job(r.job_id)
        port = await port_of(job)
        loop = asyncio.get_running_loop()
        self.assertEqual((await loop.run_in_executor(None, get, port, "hello.txt"))[0], 200)
        self.assertTrue(set(live_with(needle)) <= set(cgroup_procs(r.cgroup)) and live_with(needle))
        report = await job.stop()
        self.assertEqual(report["leftovers"], [])
        self.assertEqual(cgroup_procs(r.cgroup), [])
        self.assertEqual(live_with(needle), [])

    async def test_cancelling_a_wait_on_a_job_does_not_stop_it(self) -> None:
        t = token()
        self.tokens.append(t)
        r = await self.pt.run(["bash", "-c", f"setsid sleep {t} & echo started"], leftovers="keep")
        assert r.job_id is not None
        job = self.pt.job(r.job_id)
        with self.assertRaises(asyncio.TimeoutError):
            await asyncio.wait_for(job.wait(), 0.3)
        waiter = asyncio.ensure_future(job.wait())
        await asyncio.sleep(0.05)
        waiter.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await waiter
        # Still there, in its cgroup: only stop() stops a job. (Waited for as
        # sleep: on a loaded machine setsid may not have exec'd it yet.)
        await asyncio.sleep(0.2)
        self.assertTrue(wait_until(lambda: len(live_with(t, "sleep")) == 1, 10))
        [sleeper] = live_with(t, "sleep")
        self.assertIn(sleeper, cgroup_procs(r.cgroup))
        self.assertEqual((await job.info())["state"], "running")
        await job.stop()
        self.assertEqual(live_with(t), [])

    async def test_spawn_with_background_and_idle_timeout(self) -> None:
        call = await self.pt.spawn(["sh", "-c", "echo one; sleep 0.2; echo two"], background=True)
        assert call.job_id is not None
        self.assertIsNone(call.stdout, "a background call's output is its job's")
        self.assertEqual(await call.wait(), 0)
        self.assertEqual((await self.pt.job(call.job_id).read())["text"], "one\ntwo\n")
        # A command waiting for input that never comes: stopped after idle_timeout, reason idle.
        waiting = await self.pt.spawn(["sh", "-c", "echo waiting; read x"], stdin=True, idle_timeout=0.3)
        await waiting.wait()
        assert waiting.report is not None
        self.assertEqual(waiting.report["reason"], "idle")
        with self.assertRaises(ProcTreeError) as caught:
            await self.pt.job("c999999").tail()
        self.assertEqual(caught.exception.code, "ERR_PROCTREE_UNKNOWN_JOB")


class BlockingJobTest(unittest.TestCase):
    def test_a_background_job_through_the_blocking_api(self) -> None:
        t = token()
        try:
            with BlockingProcTree(server_command()) as pt:
                r = pt.run(["bash", "-c", f"echo ready; exec sleep {t}"], background=True)
                assert r.job_id is not None
                job = pt.job(r.job_id)
                self.assertTrue(wait_until(lambda: job.tail()["text"] == "ready\n", 5))
                [sleeper] = live_with(t, "sleep")
                self.assertIn(sleeper, cgroup_procs(r.cgroup))
                self.assertEqual([j["id"] for j in pt.jobs()], [r.job_id])
                with self.assertRaises(TimeoutError):
                    job.wait(0.2)
                self.assertEqual(job.stop(grace=1)["leftovers"], [])
                self.assertEqual(job.wait()["state"], "stopped")
                self.assertEqual(live_with(t), [])
        finally:
            kill_tokens([t])


class ClientDeathTest(unittest.TestCase):
    def test_sigkill_of_the_client_kills_its_jobs(self) -> None:
        t = token()
        harness = textwrap.dedent(
            f"""
            import asyncio, json, sys
            sys.path.insert(0, {str(CLIENT)!r})
            from proctree import ProcTree

            async def main():
                pt = await ProcTree({server_command()!r}).start()
                kept = await pt.run(["bash", "-c", "setsid sleep {t} & echo started"], leftovers="keep")
                bg = await pt.run(["sleep", "{t}"], background=True)
                print(json.dumps([pt.server_pid, kept.cgroup, bg.cgroup]), flush=True)
                await asyncio.sleep(300)

            asyncio.run(main())
            """
        )
        child = subprocess.Popen([sys.executable, "-c", harness], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            server_pid, *cgroups = json.loads(child.stdout.readline())
            self.assertTrue(wait_until(lambda: len(live_with(t, "sleep")) == 2, 5), "both jobs run")
            for cgroup in cgroups:
                self.assertTrue(cgroup_procs(cgroup), "each job is in its cgroup")
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            # The server saw its stdin close and stopped every call, jobs included.
            self.assertTrue(wait_until(lambda: live_with(t) == [], 5))
            # A killed process leaves cgroup.procs a moment after its
            # cmdline is gone (its memory goes first): waited for.
            for cgroup in cgroups:
                self.assertTrue(wait_until(lambda: cgroup_procs(cgroup) == [], 5), cgroup_procs(cgroup))
            self.assertTrue(wait_until(lambda: zombie_or_gone(server_pid), 5))
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
            kill_tokens([t])


if __name__ == "__main__":
    unittest.main()
