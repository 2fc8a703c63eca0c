"""The race file behind the race screen, as it was when the screen's race was read from it. Before
the start the screen runs what the file says now (a save in the configure screen, or an edit
elsewhere), so it compares the file's bytes with these and reads it again when they differ."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine.core.spec import RaceSpec


def _read(path: Path | None) -> bytes | None:
    try:
        return open(path, "rb").read() if path is not None else None
    except OSError:
        return None


class RaceSource:
    def __init__(self, path: Path | None, read_as: bytes | None = None) -> None:
        """read_as: the bytes the race was read from, when they were kept (else read now)."""
        self.path = path
        self.read_as = read_as if read_as is not None else _read(path)

    def changed(self) -> bool:
        return self.path is not None and _read(self.path) != self.read_as

    def now(self) -> bytes | None:
        return _read(self.path)

    async def reread(self) -> tuple[RaceSpec, bytes | None]:
        """The race the file says now, and the bytes it was read from; raises RaceFileError (with
        the file, line and key) when it no longer reads. The reading runs in a thread."""
        import anyio.to_thread

        from ..engine.racefile import load_race

        assert self.path is not None, "a race without a file is never read again"
        source = _read(self.path)
        return await anyio.to_thread.run_sync(load_race, self.path), source
