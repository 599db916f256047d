"""``max_output`` truncation (head, tail, both), checked against plain slicing
of the whole output: exact bytes, exact omitted counts, bounded memory, and
never half a UTF-8 character at a cut."""

from __future__ import annotations

import random
import unittest
from typing import List, Optional

import support  # noqa: F401  (puts this checkout's package on sys.path)

from proctree._capture import Capture, Keep, complete_prefix, complete_suffix


def feed(capture: Capture, data: bytes, sizes: List[int]) -> Capture:
    at = 0
    for size in sizes:
        capture.feed_data(data[at : at + size])
        at += size
    capture.feed_data(data[at:])
    capture.feed_eof()
    return capture


def expected(data: bytes, max_bytes: Optional[int], keep: Keep) -> bytes:
    """The reference: slice the whole output, then move each cut to a character boundary."""
    if max_bytes is None or len(data) <= max_bytes:
        return data
    head_max = {"head": max_bytes, "tail": 0, "both": max_bytes // 2}[keep]
    tail_max = max_bytes - head_max
    head = data[:head_max]
    tail = data[len(data) - tail_max :] if tail_max else b""
    head = head[: complete_prefix(head)]
    tail = tail[complete_suffix(tail) :]
    return head + tail


class CaptureTest(unittest.TestCase):
    def test_unbounded_keeps_everything(self) -> None:
        c = feed(Capture(), b"abc" * 1000, [1, 2, 3])
        self.assertEqual((c.value(), c.omitted), (b"abc" * 1000, 0))

    def test_each_mode_on_ascii(self) -> None:
        data = bytes(range(48, 58)) * 10  # 100 bytes
        for keep, value in (("head", data[:30]), ("tail", data[-30:]), ("both", data[:15] + data[-15:])):
            c = feed(Capture(30, keep), data, [7, 7, 7])  # type: ignore[arg-type]
            self.assertEqual((c.value(), c.omitted), (value, 70), keep)

    def test_no_cut_when_it_fits(self) -> None:
        for keep in ("head", "tail", "both"):
            c = feed(Capture(100, keep), b"x" * 100, [50])  # type: ignore[arg-type]
            self.assertEqual((c.value(), c.omitted), (b"x" * 100, 0))

    def test_cuts_never_split_a_character(self) -> None:
        # Characters of 1 to 4 bytes, every cut position, every mode.
        text = "aé€😀" * 50
        data = text.encode()
        for max_bytes in range(0, 40):
            for keep in ("head", "tail", "both"):
                c = feed(Capture(max_bytes, keep), data, [3, 5, 1])  # type: ignore[arg-type]
                value = c.value()
                self.assertEqual(value, expected(data, max_bytes, keep))  # type: ignore[arg-type]
                value.decode()  # raises on half a character
                self.assertEqual(c.omitted, len(data) - len(value))
                self.assertLessEqual(len(value), max_bytes)
                # A cut loses at most the 3 bytes of a character it would split.
                self.assertGreaterEqual(len(value), max_bytes - (6 if keep == "both" else 3))

    def test_marker_stands_where_bytes_were_dropped(self) -> None:
        data = b"0123456789" * 3
        marker = "<{omitted}>"
        self.assertEqual(feed(Capture(10, "head", marker), data, []).value(), b"0123456789<20>")
        self.assertEqual(feed(Capture(10, "tail", marker), data, []).value(), b"<20>0123456789")
        self.assertEqual(feed(Capture(10, "both", marker), data, []).value(), b"01234<20>56789")
        self.assertEqual(feed(Capture(100, "both", marker), data, []).value(), data)

    def test_random_output_matches_slicing_and_memory_stays_bounded(self) -> None:
        rng = random.Random(1234)
        alphabet = ["a", "\n", "é", "€", "😀", "\x00"]
        data = "".join(rng.choice(alphabet) for _ in range(200_000)).encode()
        for max_bytes in (0, 1, 7, 1000, 65_536, len(data) - 1, len(data), None):
            for keep in ("head", "tail", "both"):
                sizes = [rng.randrange(1, 70_000) for _ in range(rng.randrange(1, 20))]
                c = Capture(max_bytes, keep)  # type: ignore[arg-type]
                at = 0
                for size in sizes:
                    c.feed_data(data[at : at + size])
                    at += size
                    if max_bytes is not None:
                        held = len(c._head) + c._tail_size
                        self.assertLessEqual(held, max_bytes + max(sizes), "at most the budget plus one chunk")
                c.feed_data(data[at:])
                self.assertEqual(c.value(), expected(data, max_bytes, keep), (max_bytes, keep))  # type: ignore[arg-type]

    def test_bad_arguments(self) -> None:
        with self.assertRaises(ValueError):
            Capture(10, "middle")  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            Capture(-1)


if __name__ == "__main__":
    unittest.main()
