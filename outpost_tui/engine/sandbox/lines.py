"""A program's output, bounded by the engine whatever the program prints: a byte stream split into
lines without trusting their lengths, the tail kept for error reports, and an attempt's log
bounded on its way to the events (and so to the flight log, the model and the screen)."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import replace

from ..core.events import Event, FileChange, Log, Text, Tool, ToolResult

# A line longer than this is cut: its first MAX_LINE bytes are kept and the rest, until the next
# newline, counted and dropped. Agents print multi-megabyte JSON lines, which decoders must see
# whole; log text is cut much shorter below.
MAX_LINE = 4 * 1024 * 1024
_CUT = re.compile(r" …\[line truncated: (\d+) bytes cut\]$")


def truncated(kept: str, cut: int) -> str:
    """A line whose `cut` last bytes were dropped, saying so."""
    return f"{kept} …[line truncated: {cut} bytes cut]"


class LineSplitter:
    """Feed bytes, get complete decoded lines; memory is bounded by MAX_LINE (and a chunk)."""

    __slots__ = ("_buffer", "_cut", "_dropping", "max_line")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buffer = bytearray()
        self._dropping = False
        self._cut = 0  # bytes dropped from the line being read
        self.max_line = max_line

    def feed(self, chunk: bytes) -> list[str]:
        lines: list[str] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if not self._dropping and len(self._buffer) + end - start > self.max_line:
                room = self.max_line - len(self._buffer)
                self._buffer += chunk[start : start + room]
                self._dropping, start = True, start + room
            if self._dropping:
                self._cut += end - start
                lines.append(self._cut_line())
            else:
                self._buffer += chunk[start:end]
                lines.append(self._decode(self._buffer))
                self._buffer.clear()
            start = end + 1
        if self._dropping:
            self._cut += len(chunk) - start
        else:
            self._buffer += chunk[start:]
            if len(self._buffer) > self.max_line:
                # the head is held until the line ends, so the line says how much of it was cut
                self._cut = len(self._buffer) - self.max_line
                del self._buffer[self.max_line :]
                self._dropping = True
        return lines

    def flush(self) -> list[str]:
        if self._dropping:
            return [self._cut_line()]
        if self._buffer:
            line = self._decode(self._buffer)
            self._buffer.clear()
            return [line]
        return []

    def _cut_line(self) -> str:
        line = truncated(self._decode(self._buffer), self._cut)
        self._buffer.clear()
        self._dropping, self._cut = False, 0
        return line

    @staticmethod
    def _decode(data: bytes | bytearray) -> str:
        text = data.decode("utf-8", "replace")
        return text[:-1] if text.endswith("\r") else text


class Tail:
    """The last `limit` bytes of a stream, for error reports."""

    __slots__ = ("_data", "limit")

    def __init__(self, limit: int) -> None:
        self._data = bytearray()
        self.limit = limit

    def add(self, chunk: bytes) -> None:
        self._data += chunk
        if len(self._data) > 2 * self.limit:
            del self._data[: len(self._data) - self.limit]

    def text(self) -> str:
        return bytes(self._data[-self.limit :]).decode("utf-8", "replace")


# ------------------------------------------------------------------------------ an attempt's log

# What one attempt may write of log text (lines, the agent's words, its tools) into its flight
# log. Past it the rest is counted and dropped from the middle: the first LOG_LIMIT - LOG_TAIL
# bytes (what the agent set out to do) and the last LOG_TAIL (how it ended, the part an operator
# reads first) are kept, with one line between them saying how much was cut.
LOG_LIMIT = 32 * 1024 * 1024
LOG_TAIL = 8 * 1024 * 1024
# A log line (and the agent's words in one event) longer than this is cut to its head: a panel
# shows a screenful of it, and the model's ring holds thousands.
MAX_LOG_LINE = 16 * 1024
MAX_TEXT = 64 * 1024
# What an event costs beyond its text, in the flight log (its envelope) and in memory while held.
_EVENT_COST = 128
_LINE_COST = 64
CUT_STREAM = "stderr"

_Bounded = Log | Text | Tool | ToolResult | FileChange


def _bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _size(text: str) -> int:
    """Bytes of `text` as a JSON string (quotes, escapes; UTF-8)."""
    return _bytes(text) + text.count('"') + text.count("\\") + 2


def _clip(text: str, limit: int) -> tuple[str, int]:
    """`text` cut to `limit` characters, saying so; and the bytes it lost, with what the splitter
    had cut already."""
    found = _CUT.search(text) if text.endswith("bytes cut]") else None
    before = int(found.group(1)) if found else 0
    if len(text) <= limit:
        return text, before
    body = text[: found.start()] if found else text
    if len(body) <= limit:
        return text, before
    lost = len(body[limit:].encode("utf-8", "surrogatepass")) + before
    return truncated(body[:limit], lost), lost


class LogBudget:
    """One attempt's log text on its way to the bus: each line and each of the agent's words cut
    to a length, and the whole bounded by LOG_LIMIT. Past the head, what comes is held in a tail
    of LOG_TAIL bytes (older parts counted and dropped) until `release` hands it on, after the
    line saying how much was cut. Events that are not log text pass untouched: usage, quota and
    the rest are the race's accounting, and bounded by what the decoders make of the lines."""

    def __init__(
        self, limit: int = LOG_LIMIT, tail: int = LOG_TAIL, line: int = MAX_LOG_LINE, text: int = MAX_TEXT
    ) -> None:
        self.head_left = limit - tail
        self.tail = tail
        self.line = line
        self.text = text
        self.over = False  # the head is spent: from here on events are held
        self.cut = 0  # bytes of output dropped, since the last release
        self.cut_lines = 0
        self.total_cut = 0
        # held past the head: (cost, bytes of output, stream, line) per log line, else an event
        self._held: deque[tuple[int, int, str | None, str | Event]] = deque()
        self._held_size = 0

    def admit(self, event: Event) -> Event | None:
        """The event to publish now (its text cut to length), or None: held for the tail."""
        if not isinstance(event, _Bounded):
            return event
        event, size = self._clipped(event)
        if not self.over:
            if size <= self.head_left:
                self.head_left -= size
                return event
            self.over = True
        if isinstance(event, Log):
            for line in event.lines:
                # the output it stands for: the line and its newline
                self._hold((_size(line) + _LINE_COST, _bytes(line) + 1, event.stream, line))
        else:
            self._hold((size, size, None, event))
        return None

    def release(self, key: str, attempt: int) -> list[Event]:
        """What was held, in order, after one line saying how much was cut (when any was)."""
        out: list[Event] = []
        if self.cut:
            what = f"{self.cut} bytes of output cut" + (
                f" ({self.cut_lines} lines)" if self.cut_lines else ""
            )
            out.append(Log(key=key, attempt=attempt, stream=CUT_STREAM, lines=[f"outpost: {what}"]))
        stream: str | None = None
        lines: list[str] = []
        for _cost, _bytes, held_stream, item in self._held:
            if held_stream is not None and held_stream == stream:
                assert isinstance(item, str)
                lines.append(item)
                continue
            if lines:
                assert stream is not None
                out.append(Log(key=key, attempt=attempt, stream=stream, lines=lines))
            stream, lines = held_stream, []
            if isinstance(item, str):
                lines.append(item)
            else:
                out.append(item)
        if lines:
            assert stream is not None
            out.append(Log(key=key, attempt=attempt, stream=stream, lines=lines))
        self._held.clear()
        self._held_size = 0
        self.cut = self.cut_lines = 0
        return out

    def _hold(self, unit: tuple[int, int, str | None, str | Event]) -> None:
        self._held.append(unit)
        self._held_size += unit[0]
        while self._held_size > self.tail:
            cost, data, stream, _item = self._held.popleft()
            self._held_size -= cost
            self._count(data, 1 if stream is not None else 0)

    def _count(self, data: int, lines: int) -> None:
        self.cut += data
        self.total_cut += data
        self.cut_lines += lines

    def _clipped(self, event: _Bounded) -> tuple[Event, int]:
        if isinstance(event, Log):
            lines, size, lost = [], _EVENT_COST, 0
            changed = False
            for line in event.lines:
                if len(line) > self.line or line.endswith("bytes cut]"):
                    clipped, cut = _clip(line, self.line)
                    changed = changed or clipped is not line
                    line, lost = clipped, lost + cut
                lines.append(line)
                size += _size(line) + 1
            if lost:
                self.total_cut += lost
            return (replace(event, lines=lines) if changed else event), size
        if isinstance(event, Text):
            words, lost = _clip(event.text, self.text)
            self.total_cut += lost
            return (replace(event, text=words) if lost else event), _EVENT_COST + _size(words)
        return event, _EVENT_COST + len(str(event.payload()))
