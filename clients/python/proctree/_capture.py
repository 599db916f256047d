"""What ``run()`` keeps of a stream: everything, or at most ``max_output``
bytes (the head, the tail, or both), applied as the chunks arrive so memory
stays bounded however much a command writes.

A cut never splits a UTF-8 character: the bytes of a character cut in two
count as omitted. Output that is not UTF-8 is cut the same way, losing at
most three extra bytes per cut.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Literal, Optional, Tuple

Keep = Literal["head", "tail", "both"]
KEEPS = ("head", "tail", "both")


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _sequence_length(lead: int) -> int:
    if lead < 0x80:
        return 1
    if lead & 0xE0 == 0xC0:
        return 2
    if lead & 0xF0 == 0xE0:
        return 3
    if lead & 0xF8 == 0xF0:
        return 4
    return 1  # not a lead byte: invalid data, leave it alone


def complete_prefix(data: bytes) -> int:
    """Length of ``data`` without a UTF-8 character cut off at its end."""
    end = len(data)
    for i in range(end - 1, max(end - 4, -1), -1):
        if _is_continuation(data[i]):
            continue
        return i if i + _sequence_length(data[i]) > end else end
    return end


def complete_suffix(data: bytes) -> int:
    """Offset in ``data`` past the continuation bytes of a character cut off at its start."""
    start = 0
    while start < min(3, len(data)) and _is_continuation(data[start]):
        start += 1
    return start


class Capture:
    """Collects one stream of a ``run()``; fed by the call's events.

    With ``max_bytes`` None everything is kept. Otherwise ``keep`` says which
    part: ``'head'`` the first bytes, ``'tail'`` the last ones, ``'both'`` the
    first half and the last half of the budget. ``omitted`` counts what was
    dropped. Memory: at most ``max_bytes`` plus one chunk.
    """

    def __init__(self, max_bytes: Optional[int] = None, keep: Keep = "head", marker: Optional[str] = None):
        if keep not in KEEPS:
            raise ValueError(f"keep must be one of {', '.join(map(repr, KEEPS))}, not {keep!r}")
        if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 0):
            raise ValueError(f"max_output must be a non-negative number of bytes, not {max_bytes!r}")
        self._max = max_bytes
        self._keep = keep
        self._marker = marker
        if max_bytes is None:
            self._head_max, self._tail_max = -1, 0
        elif keep == "head":
            self._head_max, self._tail_max = max_bytes, 0
        elif keep == "tail":
            self._head_max, self._tail_max = 0, max_bytes
        else:
            self._head_max = max_bytes // 2
            self._tail_max = max_bytes - self._head_max
        self._head = bytearray()
        self._tail: Deque[bytes] = deque()
        self._tail_size = 0
        self.total = 0
        self.eof = False

    # The StreamReader-like surface the call feeds.
    def feed_data(self, data: bytes) -> None:
        self.total += len(data)
        if self._head_max < 0:
            self._head += data
            return
        room = self._head_max - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data or self._tail_max == 0:
            return
        self._tail.append(bytes(data))
        self._tail_size += len(data)
        # Drop whole chunks that lie entirely before the last tail_max bytes.
        while self._tail and self._tail_size - len(self._tail[0]) >= self._tail_max:
            self._tail_size -= len(self._tail.popleft())

    def feed_eof(self) -> None:
        self.eof = True

    def set_exception(self, exc: BaseException) -> None:
        self.eof = True

    def _parts(self) -> Tuple[bytes, bytes]:
        head = bytes(self._head)
        tail = b"".join(self._tail)
        if self._head_max < 0:
            return head, b""
        if len(tail) > self._tail_max:
            tail = tail[len(tail) - self._tail_max :]
        if self.total > len(head) + len(tail):
            # Something was dropped between head and tail: both ends are cuts.
            head = head[: complete_prefix(head)]
            tail = tail[complete_suffix(tail) :]
        return head, tail

    @property
    def omitted(self) -> int:
        head, tail = self._parts()
        return self.total - len(head) - len(tail)

    def value(self) -> bytes:
        """What is kept; with a marker, the marker stands where bytes were dropped."""
        head, tail = self._parts()
        omitted = self.total - len(head) - len(tail)
        if omitted == 0 or self._marker is None:
            return head + tail
        return head + self._marker.format(omitted=omitted).encode() + tail
