"""LocalTransport on real files: compare-and-swap, permissions, symlinks, corruption, locks."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from outpost_tui import exitcodes
from outpost_tui.engine.durable.local_transport import HEADER_SIZE, LocalTransport
from outpost_tui.engine.durable.transport import (
    CorruptObject,
    InvalidKey,
    ObjectTooLarge,
    StorageUnwritable,
    TransportConflict,
    TransportError,
)
from outpost_tui.engine.pids import process_start, this_boot, this_host

KEY = "speculations/abc.json"


@pytest.fixture
def storage(tmp_path: Path) -> LocalTransport:
    return LocalTransport(tmp_path / "storage")


def lock_path(storage: LocalTransport) -> Path:
    return storage.directory / "locks" / (hashlib.sha256(KEY.encode()).hexdigest()[:40] + ".lock")


def holder(pid: int) -> dict:
    """A lock file's content, as the process `pid` writes it."""
    return {"pid": pid, "host": this_host(), "boot": this_boot(), "start": process_start(pid), "key": KEY}


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_write_then_read_returns_the_bytes_and_revision(storage: LocalTransport) -> None:
    before = time.time()
    revision = storage.write(KEY, b'{"a": 1}', if_revision=None)
    stored = storage.read(KEY)
    assert stored is not None
    assert (stored.data, stored.revision, stored.size) == (b'{"a": 1}', revision, 8)
    assert before - 1 <= stored.modified_at <= time.time() + 1
    raw = storage.object_path(KEY).read_bytes()
    assert len(raw) == HEADER_SIZE + 8 and raw[HEADER_SIZE - 1 : HEADER_SIZE] == b"\n"
    assert json.loads(raw[:HEADER_SIZE])["revision"] == revision
    assert storage.read("speculations/missing.json") is None
    assert LocalTransport(storage.directory / "nowhere").read(KEY) is None


def test_compare_and_swap(storage: LocalTransport) -> None:
    first = storage.write(KEY, b"one", if_revision=None)
    with pytest.raises(TransportConflict) as created_twice:
        storage.write(KEY, b"two", if_revision=None)
    assert created_twice.value.exit_code == exitcodes.REVISION_CHANGED
    second = storage.write(KEY, b"two", if_revision=first)
    assert second != first
    with pytest.raises(TransportConflict):
        storage.write(KEY, b"three", if_revision=first)  # stale
    with pytest.raises(TransportConflict):
        storage.write("speculations/other.json", b"x", if_revision=first)  # expects an object that is absent
    assert storage.read(KEY).data == b"two"
    with pytest.raises(TransportConflict):
        storage.remove(KEY, if_revision=first)
    storage.remove(KEY, if_revision=second)
    assert storage.read(KEY) is None
    with pytest.raises(TransportConflict):
        storage.remove(KEY, if_revision=second)


def test_concurrent_creates_from_threads_exactly_one_wins(storage: LocalTransport) -> None:
    results: list[str] = []
    start = threading.Barrier(8)

    def create(n: int) -> None:
        start.wait()
        try:
            storage.write(KEY, str(n).encode(), if_revision=None)
            results.append("won")
        except TransportConflict:
            results.append("conflict")

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["conflict"] * 7 + ["won"]


def test_permissions_do_not_depend_on_the_umask(tmp_path: Path) -> None:
    storage = LocalTransport(tmp_path / "deep" / "storage")
    old = os.umask(0)
    try:
        storage.write(KEY, b"x", if_revision=None)
    finally:
        os.umask(old)
    for directory in (
        tmp_path / "deep",
        storage.directory,
        storage.directory / "objects",
        storage.directory / "objects" / "speculations",
        storage.directory / "locks",
    ):
        assert mode(directory) == 0o700, directory
    assert mode(storage.object_path(KEY)) == 0o600
    # No temp or lock file is left behind.
    assert os.listdir(storage.directory / "objects" / "speculations") == ["abc.json.object"]
    assert os.listdir(storage.directory / "locks") == []


def test_symlinked_objects_directory_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    storage = LocalTransport(tmp_path / "storage")
    storage.directory.mkdir()
    (storage.directory / "objects").symlink_to(elsewhere)
    for action in (
        lambda: storage.write(KEY, b"x", if_revision=None),
        lambda: storage.read(KEY),
        lambda: storage.list(""),
    ):
        with pytest.raises(TransportError, match=r"refusing symlink .*objects"):
            action()
    assert list(elsewhere.iterdir()) == []


def test_symlinked_object_file_is_refused_and_its_target_kept(
    storage: LocalTransport, tmp_path: Path
) -> None:
    storage.write("speculations/other.json", b"x", if_revision=None)
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    storage.object_path(KEY).symlink_to(target)
    with pytest.raises(TransportError, match="refusing symlink"):
        storage.read(KEY)
    with pytest.raises(TransportError, match="refusing symlink"):
        storage.write(KEY, b"overwrite", if_revision=None)
    assert target.read_bytes() == b"precious"
    listed = {entry.key: entry for entry in storage.list("speculations/")}
    assert listed["speculations/other.json"].problem is None
    assert "symlink" in listed[KEY].problem


def test_size_limit(tmp_path: Path) -> None:
    storage = LocalTransport(tmp_path / "storage", max_bytes=100)
    storage.write(KEY, b"x" * 100, if_revision=None)
    with pytest.raises(ObjectTooLarge, match="exceed the 100-byte limit") as refused:
        storage.write(KEY, b"x" * 101, if_revision=storage.read(KEY).revision)
    assert "\n" not in str(refused.value)
    assert storage.read(KEY).size == 100
    # An object larger than the reader's limit is refused on read too.
    with pytest.raises(ObjectTooLarge, match="over the 50-byte limit"):
        LocalTransport(storage.directory, max_bytes=50).read(KEY)


@pytest.mark.parametrize("damage", ["header", "truncated", "short-header", "wrong-key"])
def test_corrupt_objects_are_reported_and_left_untouched(storage: LocalTransport, damage: str) -> None:
    revision = storage.write(KEY, b"payload-bytes", if_revision=None)
    path = storage.object_path(KEY)
    raw = path.read_bytes()
    if damage == "header":
        raw = b"{garbage" + raw[8:]
    elif damage == "truncated":
        raw = raw[:-3]
    elif damage == "short-header":
        raw = raw[:100]
    else:
        raw = raw.replace(b'"key": "speculations/abc.json"', b'"key": "speculations/xyz.json"')
    path.write_bytes(raw)
    with pytest.raises(CorruptObject) as corrupt:
        storage.read(KEY)
    message = str(corrupt.value)
    assert str(path) in message and "\n" not in message
    assert corrupt.value.exit_code == exitcodes.CORRUPT_CHECKPOINT
    # A write cannot clobber it either, whatever revision it claims to expect.
    with pytest.raises(CorruptObject):
        storage.write(KEY, b"new", if_revision=revision)
    assert path.read_bytes() == raw


@pytest.mark.parametrize(
    "key", ["", "/abs", "../x", "a/../b", "a//b", "a/./b", ".hidden", "a/", "a b", "a\\b", "x" * 600]
)
def test_bad_keys_are_refused(storage: LocalTransport, key: str) -> None:
    with pytest.raises(InvalidKey) as refused:
        storage.write(key, b"x", if_revision=None)
    assert refused.value.exit_code == exitcodes.BAD_INPUT
    assert not (storage.directory / "objects").exists() or not any((storage.directory / "objects").rglob("*"))


def test_list_by_prefix(storage: LocalTransport) -> None:
    revisions = {
        key: storage.write(key, key.encode(), if_revision=None)
        for key in ("speculations/b.json", "speculations/a.json", "other/c.json", "top")
    }
    # A leftover temp file from a crashed writer is not an object.
    (storage.directory / "objects" / "speculations" / ".a.json.object.dead.tmp").write_bytes(b"junk")
    entries = storage.list("speculations/")
    assert [entry.key for entry in entries] == ["speculations/a.json", "speculations/b.json"]
    assert all(entry.revision == revisions[entry.key] and entry.size == len(entry.key) for entry in entries)
    assert [entry.key for entry in storage.list()] == [
        "other/c.json",
        "speculations/a.json",
        "speculations/b.json",
        "top",
    ]
    assert storage.list("nothing/") == []


def test_stale_lock_of_a_dead_process_is_broken(storage: LocalTransport) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    held = holder(dead.pid)
    dead.wait()
    storage.write("warm/up", b"x", if_revision=None)  # creates the locks directory
    lock = lock_path(storage)
    lock.write_text(json.dumps(held))
    began = time.monotonic()
    storage.write(KEY, b"x", if_revision=None)
    assert time.monotonic() - began < 5
    assert not lock.exists()


def test_a_live_lock_holder_is_waited_for_then_times_out(tmp_path: Path) -> None:
    storage = LocalTransport(tmp_path / "storage", lock_timeout=0.3)
    storage.write("warm/up", b"x", if_revision=None)
    lock = lock_path(storage)
    lock.write_text(json.dumps(holder(os.getpid())))
    with pytest.raises(TransportError, match=f"timed out .*held by pid {os.getpid()}"):
        storage.write(KEY, b"x", if_revision=None)
    assert lock.exists() and storage.read(KEY) is None
    # Released while a writer waits: the writer proceeds.
    storage.lock_timeout = 10
    timer = threading.Timer(0.2, lock.unlink)
    timer.start()
    try:
        storage.write(KEY, b"after", if_revision=None)
    finally:
        timer.join()
    assert storage.read(KEY).data == b"after"


def test_a_clock_step_does_not_make_a_live_holder_look_dead(tmp_path: Path, step_clock) -> None:
    """A fresh machine's clock set by NTP mid-run would make every live lock look stale: a waiter
    broke a holder's lock, then unlinked one already released (ENOENT), and two writers could race."""
    storage = LocalTransport(tmp_path / "storage", lock_timeout=0.3)
    storage.write("warm/up", b"x", if_revision=None)
    lock = lock_path(storage)
    lock.write_text(json.dumps(holder(os.getpid())))
    step_clock(30)
    with pytest.raises(TransportError, match=f"timed out .*held by pid {os.getpid()}"):
        storage.write(KEY, b"x", if_revision=None)
    assert lock.exists() and storage.read(KEY) is None
    # the control: a holder from another boot, or one that exited, is broken at once
    revision = None
    for other in ({**holder(os.getpid()), "boot": "an-earlier-boot"}, {**holder(os.getpid()), "start": 0.0}):
        lock.write_text(json.dumps(other))
        revision = storage.write(KEY, b"x", if_revision=revision)
        assert not lock.exists()


def test_unwritable_storage_is_one_clear_line(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        directory = tmp_path / "storage"
        directory.mkdir(mode=0o500)
        with pytest.raises(StorageUnwritable) as refused:
            LocalTransport(directory).write(KEY, b"x", if_revision=None)
        message = str(refused.value)
    else:
        # Root ignores permission bits: write as an unprivileged user in a forked child (the
        # interpreter lives under /root, so a fresh one could not be started as that user).
        base = Path(tempfile.mkdtemp())
        try:
            os.chmod(base, 0o755)
            directory = base / "storage"
            directory.mkdir(mode=0o755)
            message = unprivileged_write(directory)
            assert list(directory.iterdir()) == []
        finally:
            subprocess.run(["rm", "-rf", str(base)], check=True)
    assert f"storage {directory} is not writable" in message and "\n" not in message


def unprivileged_write(directory: Path) -> str:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_end)
            os.setgid(65534)
            os.setuid(65534)
            try:
                LocalTransport(directory).write(KEY, b"x", if_revision=None)
                report = "written"
            except StorageUnwritable as error:
                report = f"{error.exit_code} {error}"
            os.write(write_end, report.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read().decode()
    os.waitpid(pid, 0)
    code, _, message = report.partition(" ")
    assert code == str(exitcodes.STORAGE_UNWRITABLE), report
    return message
