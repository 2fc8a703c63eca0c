"""Splitting a byte stream into lines without trusting its line lengths."""

from __future__ import annotations

# A line longer than this is cut: the first MAX_LINE bytes are kept, the rest until the next
# newline is dropped and the line is marked. Agents can print multi-megabyte JSON lines.
MAX_LINE = 4 * 1024 * 1024
TRUNCATED = " …[line truncated]"


class LineSplitter:
    """Feed bytes, get complete decoded lines; memory is bounded by MAX_LINE."""

    __slots__ = ("_buffer", "_dropping", "max_line")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buffer = bytearray()
        self._dropping = False
        self.max_line = max_line

    def feed(self, chunk: bytes) -> list[str]:
        lines: list[str] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if self._dropping:
                self._dropping = False
            else:
                self._buffer += chunk[start:end]
                lines.append(self._decode(self._buffer))
                self._buffer.clear()
            start = end + 1
        if not self._dropping:
            self._buffer += chunk[start:]
            if len(self._buffer) > self.max_line:
                lines.append(self._decode(self._buffer[: self.max_line]) + TRUNCATED)
                self._buffer.clear()
                self._dropping = True
        return lines

    def flush(self) -> list[str]:
        if self._buffer:
            line = self._decode(self._buffer)
            self._buffer.clear()
            return [line]
        return []

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
