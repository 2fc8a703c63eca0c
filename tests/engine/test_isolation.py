"""Isolation by construction, tried as an attacker would: each attack runs in a real race with
isolation "bubblewrap" (it must fail, or change nothing the user owns) and, as its control, with
isolation "none" (today's unisolated mode: the same attack reaches its target, so the test would
see it if the fence let it through).

The run's temporary directory stays writable for candidates elsewhere in the suite
(OUTPOST_WRITABLE); here it is taken away, so that every path an attack aims at is one the fence
alone decides about.
"""

from __future__ import annotations

import errno
import os
import platform
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from outpost_tui.engine import CandidateSpec, CandidateStatus, EventKind, RaceStatus, build_spec, run_race
from outpost_tui.engine.core.spec import SandboxSpec
from outpost_tui.engine.git import head_and_commits, merge_candidate
from outpost_tui.engine.records import seal
from outpost_tui.engine.sandbox import isolation
from tests.conftest import HOST_PID, git, make_repo
from tests.fixtures import host_pids

pytestmark = pytest.mark.skipif(
    isolation.probe().program is None, reason=f"bubblewrap cannot run here: {isolation.probe().why}"
)
MODES = ["bubblewrap", "none"]
COMMIT = "git add -A && git -c user.name=c -c user.email=c@x commit -qm"


@pytest.fixture(autouse=True)
def nothing_writable_but_the_fence(monkeypatch):
    monkeypatch.delenv(isolation.WRITABLE_VARIABLE, raising=False)


@pytest.fixture
def signals(tmp_path, monkeypatch) -> Path:
    """A directory candidates signal each other through, and the socket that tells host pids."""
    path = tmp_path / "signals"
    path.mkdir()
    monkeypatch.setenv(isolation.WRITABLE_VARIABLE, f"{path}:{os.environ[host_pids.VARIABLE]}")
    return path


@pytest.fixture
def repo(tmp_path) -> Path:
    root = make_repo(tmp_path / "repo")
    git(root, "branch", "other")
    git(root, "tag", "v1")
    return root


def attacker(key: str, script: str, **options) -> CandidateSpec:
    return CandidateSpec(key, "command", "win", command=("sh", "-c", script), **options)


def race(repo: Path, mode: str, *candidates: CandidateSpec, **options):
    spec = build_spec(
        repository=repo,
        candidates=list(candidates),
        validate=["true"],
        sandbox=SandboxSpec(isolation=mode),
        **options,
    )
    return run_race(spec)


def refs(repo: Path) -> dict[str, str]:
    """The user's refs: everything but the engine's own (attempt branches, archives)."""
    listed = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    engines = ("refs/heads/outpost/", "refs/outpost/validated/")
    return dict(line.split(" ", 1) for line in listed.splitlines() if not line.startswith(engines))


def tried(script: str) -> str:
    """`script`, its exit status appended to the worktree's attack.log; the attack goes on."""
    return f'( {script} ) >/dev/null 2>&1; echo "$?" >> attack.log'


def committed(repo: Path, record, name: str) -> str:
    """A file as the candidate committed it (what it saw, how its attacks ended)."""
    assert record.commit, record.error
    return git(repo, "show", f"{record.commit}:{name}")


def statuses(repo: Path, record) -> list[int]:
    return [int(line) for line in committed(repo, record, "attack.log").split()]


# -- 1. a candidate's world is its worktree -------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_git_commands_never_reach_the_users_refs(repo, mode):
    before = refs(repo)
    script = " && ".join(
        [
            f"echo fix > fix.txt && {COMMIT} fix",
            "git update-ref refs/heads/main HEAD",  # move the user's branch onto its commit
            "git branch -f other HEAD",
            "git branch planted HEAD",
            "git tag -f v1 HEAD",
            "git update-ref refs/outpost/archive/forged HEAD",
            "git replace $(git rev-parse HEAD~1) HEAD",
            "git update-ref refs/heads/outpost/elsewhere/rival/1 HEAD",
        ]
    )
    result = race(repo, mode, attacker("sly", script))
    record = result.candidates[0]
    if mode == "bubblewrap":
        assert refs(repo) == before  # never touched, nothing to undo
        assert result.tampering == []
        assert record.status is CandidateStatus.WINNER  # its own branch holds its honest commit
        assert git(repo, "log", "-1", "--format=%s", record.branch) == "fix"
        assert not git(repo, "for-each-ref", "refs/outpost/archive/forged", "refs/replace")
    else:
        # unisolated, every write lands in the user's repository: only the guard's report after
        # the fact says so (and not all of it can be undone)
        reported = " ".join(str(entry) for entry in result.tampering)
        for name in ("refs/heads/main", "refs/heads/planted", "refs/tags/v1", "refs/replace/"):
            assert name in reported


@pytest.mark.parametrize("mode", MODES)
def test_writes_into_the_users_git_directory_and_files_fail(repo, mode):
    common = repo / ".git"
    blob = git(repo, "rev-parse", "HEAD:base.txt")
    targets = {
        "ref file": common / "refs" / "heads" / "by-hand",
        "hook": common / "hooks" / "post-checkout",
        "config": common / "config",
        "attributes": common / "info" / "attributes",
        "object": common / "objects" / blob[:2] / blob[2:],
        "user's file": repo / "base.txt",
        "records": repo / ".outpost" / "forged.json",
    }
    contents = {name: path.read_bytes() if path.is_file() else None for name, path in targets.items()}
    script = " ; ".join(
        [
            *(
                tried(f"chmod u+w {shlex.quote(str(p))}; echo pwned >> {shlex.quote(str(p))}")
                for p in targets.values()
            ),
            f"echo ok > ok.txt && {COMMIT} ok",
        ]
    )
    result = race(repo, mode, attacker("sly", script))
    record = result.candidates[0]
    after = {name: path.read_bytes() if path.is_file() else None for name, path in targets.items()}
    if mode == "bubblewrap":
        ended = statuses(repo, record)
        assert len(ended) == len(targets) and 0 not in ended  # every write refused (read-only or hidden)
        assert after == contents
    else:
        assert statuses(repo, record) == [0] * len(targets)  # each write landed on the host
        assert after["records"] == b"pwned\n"


@pytest.mark.parametrize("mode", MODES)
def test_a_candidate_has_no_capability_to_take_its_fence_down(repo, mode):
    """Run by root (as in CI), a fence that kept root's capabilities could be unmounted and
    remounted from inside: the tmpfs over .outpost/ gone, the repository's read-only bind made
    writable, and every write below would land."""
    common, records = repo / ".git", repo / ".outpost"
    targets = {"ref file": common / "refs" / "heads" / "by-hand", "records": records / "forged.json"}
    root = shlex.quote(str(repo))
    script = " ; ".join(
        [
            "grep '^CapEff:' /proc/self/status > caps.txt",
            "here=$(pwd)",
            # on the host, unisolated, neither is a mount point: both fail and change nothing
            tried(f"umount -l {shlex.quote(str(records))}"),
            tried(f"mount -o remount,bind,rw {root}"),
            # (its worktree, found again by its path, if the unmount took it away)
            'cd "$here"',
            *(tried(f"echo pwned > {shlex.quote(str(p))}") for p in targets.values()),
            f"{COMMIT} caps",
        ]
    )
    result = race(repo, mode, attacker("sly", script))
    record = result.candidates[0]
    ended = statuses(repo, record)
    if mode == "bubblewrap":
        assert [name for name, path in targets.items() if path.exists()] == []
        assert 0 not in ended, ended
        assert committed(repo, record, "caps.txt").split() == ["CapEff:", "0" * 16]
    else:
        assert ended[2:] == [0, 0]  # nothing but the fence stands between it and these files
        assert (records / "forged.json").read_text() == "pwned\n"


@pytest.mark.parametrize("mode", MODES)
def test_a_candidate_cannot_write_the_kernels_settings(repo, mode):
    """Root without capabilities may still write /proc/sys: core_pattern names a program the kernel
    runs as root outside every namespace when a process dumps core. Asked without writing (is it
    writable?), so the control changes nothing either."""
    if mode == "none" and os.geteuid() != 0:
        pytest.skip("only root can write the kernel's settings: nothing to control here")
    script = f"{tried('test -w /proc/sys/kernel/core_pattern')} ; {COMMIT} asked"
    result = race(repo, mode, attacker("sly", script))
    [ended] = statuses(repo, result.candidates[0])
    assert (ended == 0) is (mode == "none")


@pytest.fixture
def shared_mount(repo, tmp_path):
    """A shared mount the host will mount on during the race (as a container engine's storage, or
    / itself on a systemd machine, is), in the repository (the fence shows it, read-only; the
    host's /tmp it does not): the directory, and where the later mount comes from."""
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    shared, outside = repo / "shared", tmp_path / "outside"
    (shared / "x").mkdir(parents=True)
    outside.mkdir()
    subprocess.run(["mount", "--bind", shared, shared], check=True)
    try:
        subprocess.run(["mount", "--make-shared", shared], check=True)
        yield shared, outside
    finally:
        subprocess.run(["umount", "-R", "-l", shared], check=False)


@pytest.mark.parametrize("mode", MODES)
def test_a_mount_the_host_makes_during_the_race_is_not_writable_in_the_fence(repo, shared_mount, mode):
    """The fence's mounts are read-only as it starts; one the host makes later under a shared mount
    would reach it with its own flags (a container's root filesystem, writable, where a candidate
    plants what that container runs as root)."""
    shared, outside = shared_mount
    directories: dict[str, Path] = {}

    def mount_when_inside() -> None:
        # once the candidate is in its fence: the host mounts, then says go
        started = directories["sly"] / "started"
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        subprocess.run(["mount", "--bind", outside, shared / "x"], check=True)
        (directories["sly"] / "go").touch()

    def on_event(event) -> None:
        if event.kind is EventKind.WORKTREE_READY:
            directories[event.key] = Path(event.directory)
            threading.Thread(target=mount_when_inside, daemon=True).start()

    script = (
        "touch started; until [ -e go ]; do sleep 0.02; done; "
        + tried(f"echo pwned > {shlex.quote(str(shared / 'x' / 'pwned.txt'))}")
        + f"; rm started go; {COMMIT} tried"
    )
    spec = build_spec(
        repository=repo,
        candidates=[attacker("sly", script)],
        validate=["true"],
        sandbox=SandboxSpec(isolation=mode),
    )
    result = run_race(spec, on_event=on_event)
    [ended] = statuses(repo, result.candidates[0])
    if mode == "bubblewrap":
        assert ended != 0 and not (outside / "pwned.txt").exists()
    else:
        assert ended == 0 and (outside / "pwned.txt").read_text() == "pwned\n"


@pytest.fixture
def daemon_socket():
    """A listening unix socket under /run, where daemons keep theirs (a container engine's, the
    system bus): its path, and the listening socket (a connection waits in its backlog)."""
    run = os.environ.get("XDG_RUNTIME_DIR", "") if not os.access("/run", os.W_OK) else "/run"
    if not run.startswith("/run") or not os.access(run, os.W_OK):
        pytest.skip("no directory under /run to listen in")
    directory = Path(tempfile.mkdtemp(prefix="outpost-test-", dir=run))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(directory / "daemon.sock"))
        server.listen(4)
        server.setblocking(False)
        yield directory / "daemon.sock", server
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("mode", MODES)
def test_a_candidate_cannot_reach_a_daemons_socket_under_run(repo, daemon_socket, mode):
    """A socket opens what no read-only mount closes: a container engine's would start a
    container that mounts the machine, the system bus a unit outside every fence."""
    path, server = daemon_socket
    connect = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
        "s.sendall(b'run this')"
    )
    script = f"{tried(f'python3 -c {shlex.quote(connect)} {shlex.quote(str(path))}')} ; {COMMIT} asked"
    result = race(repo, mode, attacker("sly", script))
    [ended] = statuses(repo, result.candidates[0])
    try:
        connection, _ = server.accept()
    except BlockingIOError:
        heard = None
    else:
        with connection:
            connection.settimeout(10)
            heard = connection.recv(64)
    if mode == "bubblewrap":
        assert ended != 0 and heard is None
    else:
        assert ended == 0 and heard == b"run this"


# The kernel's keyrings through their system calls (no program for them is installed here), on the
# user's keyring: `read NAME` prints a key's content, `plant NAME TEXT` adds one and prints its
# serial, `drop NAME` invalidates it; a refused call prints its -errno.
KEYRINGS = """
import ctypes, platform, sys
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
SEARCH, READ, INVALIDATE, USER_KEYRING = 10, 11, 21, -4
libc = ctypes.CDLL(None, use_errno=True)
def call(number, *args):
    result = libc.syscall(number, *args)
    return result if result >= 0 else -ctypes.get_errno()
verb, name = sys.argv[1], sys.argv[2].encode()
if verb == "plant":
    print(call(ADD_KEY, b"user", name, sys.argv[3].encode(), len(sys.argv[3]), USER_KEYRING))
    sys.exit()
key = call(KEYCTL, SEARCH, USER_KEYRING, b"user", name, 0)
if key < 0:
    print(key)
elif verb == "drop":
    print(call(KEYCTL, INVALIDATE, key))
else:
    found = ctypes.create_string_buffer(64)
    size = call(KEYCTL, READ, key, found, 64)
    print(found.raw[:size].decode() if size >= 0 else size)
"""


def keyrings(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", KEYRINGS, *args], capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def users_key():
    """A secret in the user's keyring, as a tool keeps a token or a ticket there: its name and
    content. It, and the key a candidate adds beside it, are invalidated afterwards."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("the keyring calls are numbered here for x86_64 and aarch64 only")
    name = f"outpost-test-{os.getpid()}-{time.monotonic_ns()}"
    if int(keyrings("plant", name, "hunter2") or -1) < 0:
        pytest.skip("the kernel's keyrings refuse this user")
    try:
        yield name, "hunter2"
    finally:
        keyrings("drop", name)
        keyrings("drop", f"{name}-planted")


@pytest.mark.parametrize("mode", MODES)
def test_a_candidate_cannot_read_or_add_keys_in_its_users_keyring(repo, users_key, mode):
    """Keyrings are the kernel's, per user, not per mount or pid namespace: a ticket or a token
    kept there would be the candidate's to read, and a key it adds outlives the race."""
    name, secret = users_key
    program = shlex.quote(KEYRINGS)
    script = (
        f"python3 -c {program} read {name} > read.txt; "
        f"python3 -c {program} plant {name}-planted x > added.txt; {COMMIT} tried"
    )
    result = race(repo, mode, attacker("sly", script))
    [record] = result.candidates
    read, added = committed(repo, record, "read.txt").strip(), committed(repo, record, "added.txt").strip()
    if mode == "bubblewrap":
        assert (read, added) == (str(-errno.EPERM), str(-errno.EPERM))
        assert keyrings("read", f"{name}-planted") == str(-errno.ENOKEY)
    else:
        assert read == secret and int(added) > 0
        assert keyrings("read", f"{name}-planted") == "x"


def test_without_libseccomp_the_fence_runs_unfiltered_and_doctor_says_so(repo, users_key, monkeypatch):
    """Where libseccomp is not installed, the rest of the fence still holds: its commands run
    without the keyring filter (the one thing it gives), and doctor says why."""
    import ctypes.util

    from outpost_tui.engine.machine.doctor import isolation_check
    from outpost_tui.engine.sandbox import syscalls

    name, secret = users_key
    found = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda lib: None if lib == "seccomp" else found(lib))
    monkeypatch.delitem(sys.modules, "pyseccomp", raising=False)
    syscalls._built.cache_clear()
    isolation._probe_once.cache_clear()
    try:
        assert isolation.probe().program is not None
        assert "libseccomp cannot be loaded" in isolation.probe().unfiltered
        check = isolation_check(None)
        assert check.ok and "keyrings stay open to it (libseccomp cannot be loaded" in check.detail
        script = f"python3 -c {shlex.quote(KEYRINGS)} read {name} > read.txt; {COMMIT} tried"
        result = race(repo, "bubblewrap", attacker("sly", script))
        assert result.isolation["mode"] == "bubblewrap"
        assert committed(repo, result.candidates[0], "read.txt").strip() == secret
    finally:
        syscalls._built.cache_clear()
        isolation._probe_once.cache_clear()


@pytest.mark.parametrize("mode", MODES)
def test_a_candidate_cannot_write_into_its_rivals_worktree(repo, signals, mode):
    # the rival waits until the attacker is done: its worktree exists all the while
    workspaces = repo / ".outpost" / "workspaces"
    attack = (
        f"until [ -e {signals}/rival-started ]; do sleep 0.05; done; "
        f'for w in {workspaces}/*/; do [ "$w" = "$PWD/" ] || echo pwned > "$w/pwned.txt"; done; '
        f"ls {workspaces} > seen.txt; touch {signals}/go; {COMMIT} attack --allow-empty"
    )
    rival = (
        f"touch {signals}/rival-started; until [ -e {signals}/go ]; do sleep 0.05; done; "
        f"echo real > real.txt && {COMMIT} real"
    )
    result = race(
        repo,
        mode,
        attacker("sly", attack),
        attacker("honest", rival),
        concurrency=2,
        select="best",
        score=["echo", "1"],
    )
    honest = next(r for r in result.candidates if r.key == "honest")
    files = git(repo, "ls-tree", "-r", "--name-only", honest.commit).split()
    if mode == "bubblewrap":
        assert files == ["base.txt", "real.txt"]
        sly = next(r for r in result.candidates if r.key == "sly")
        assert committed(repo, sly, "seen.txt").split() == [Path(sly.directory).name]  # its own alone
    else:
        assert "pwned.txt" in files


@pytest.mark.parametrize("mode", MODES)
def test_a_candidate_cannot_signal_a_rival(repo, signals, mode):
    # the rival says its pid as the host sees it, then waits for a go that never comes if it is killed
    rival = (
        f"{sys.executable} {HOST_PID} > {signals}/rival.pid.new && "
        f"mv {signals}/rival.pid.new {signals}/rival.pid; "
        f"until [ -e {signals}/go ]; do sleep 0.05; done; echo real > real.txt && {COMMIT} real"
    )
    attack = (
        f"until [ -e {signals}/rival.pid ]; do sleep 0.05; done; "
        + tried(f"kill -9 $(cat {signals}/rival.pid)")
        + f"; touch {signals}/go; {COMMIT} attack --allow-empty"
    )
    # the rival first: a tie goes to it, so that it wins unless it is killed
    result = race(
        repo,
        mode,
        attacker("honest", rival),
        attacker("sly", attack),
        concurrency=2,
        select="best",
        score=["echo", "1"],
    )
    honest = next(r for r in result.candidates if r.key == "honest")
    sly = next(r for r in result.candidates if r.key == "sly")
    if mode == "bubblewrap":
        assert statuses(repo, sly) == [1]  # no such process in its pid namespace
        assert honest.status is CandidateStatus.WINNER
    else:
        assert statuses(repo, sly) == [0]
        assert honest.status is CandidateStatus.FAILED


@pytest.mark.parametrize("mode", MODES)
def test_the_engines_key_is_out_of_sight(repo, mode):
    seal.seal("a race", b"")  # the key exists before the race, as on any machine that ran one
    key = seal.key_path()
    script = f"(cat {shlex.quote(str(key))} | od -An -tx1 | tr -d ' \\n'; echo) > stolen.txt; {COMMIT} look"
    record = race(repo, mode, attacker("sly", script)).candidates[0]
    stolen = committed(repo, record, "stolen.txt")
    if mode == "bubblewrap":
        assert stolen == ""  # the state directory is an empty tmpfs in its world
    else:
        assert stolen == key.read_bytes().hex()


# -- the result comes in verified -----------------------------------------------------------------

BROKEN_RESULTS = {
    # its HEAD a link to a file of the user's, in the hope the engine reads it as the result
    "head link": 'ln -sf /etc/hostname "$(git rev-parse --git-dir)/HEAD"',
    # its HEAD naming a commit that exists nowhere
    "missing commit": 'echo 0123456789abcdef0123456789abcdef01234567 > "$(git rev-parse --git-dir)/HEAD"',
    # its commit object overwritten with garbage after it was made
    "corrupt object": (
        'o=$(git rev-parse HEAD); f="$(git rev-parse --git-dir)/objects/${o%${o#??}}/${o#??}"; '
        'chmod u+w "$f" && echo garbage > "$f"'
    ),
    # control: nothing broken, the commit comes in
    "honest": "true",
}


@pytest.mark.parametrize("attack", list(BROKEN_RESULTS))
def test_a_broken_private_repository_fails_the_attempt_and_leaves_its_branch_at_the_baseline(repo, attack):
    baseline = git(repo, "rev-parse", "HEAD")
    script = f"echo fix > fix.txt && {COMMIT} fix && {BROKEN_RESULTS[attack]}"
    result = race(repo, "bubblewrap", attacker("sly", script))
    record = result.candidates[0]
    if attack == "honest":
        assert record.status is CandidateStatus.WINNER
        assert git(repo, "log", "-1", "--format=%s", record.branch) == "fix"
        return
    assert record.status is CandidateStatus.FAILED
    assert record.error and "\n" not in record.error and "candidate" in record.error
    assert git(repo, "rev-parse", record.branch) == baseline
    assert git(repo, "fsck", "--no-dangling") == ""  # nothing half-imported in the user's objects


def test_a_fenced_candidates_change_to_a_tracked_file_comes_in_and_leaves_nothing_to_commit(repo):
    # the worktree's own index still holds the baseline's stat data for the file it changed: the
    # index is brought to its commit whatever those say, and nothing is committed on its behalf
    result = race(repo, "bubblewrap", attacker("honest", f"echo changed > base.txt && {COMMIT} change"))
    record = result.candidates[0]
    assert record.status is CandidateStatus.WINNER, record.error
    assert record.committed_on_behalf is False
    assert git(repo, "show", f"{record.commit}:base.txt") == "changed"
    assert git(repo, "log", "-1", "--format=%s", record.branch) == "change"


CLAIMED_RESULTS = {
    # the user's other branch, which holds the fix: a commit it read, not one it made
    "a commit of the user's": "git reset -q --hard other",
    # its repository swapped for a link into the user's, where HEAD names a commit it never made
    "a linked repository": 'd=$(git rev-parse --absolute-git-dir); mv "$d" "$d.gone"; ln -s {common} "$d"',
    # control: its own commit of the same fix
    "honest": f"echo fix > fix.txt && {COMMIT} fix",
}


@pytest.mark.parametrize("attack", list(CLAIMED_RESULTS))
def test_a_result_that_is_not_the_candidates_own_commit_is_refused(repo, attack):
    git(repo, "checkout", "-q", "other")
    (repo / "fix.txt").write_text("fix\n")
    git(repo, "add", "fix.txt")
    git(repo, "commit", "-qm", "the user's own fix, on a branch of theirs")
    git(repo, "checkout", "-q", "main")
    baseline = git(repo, "rev-parse", "HEAD")
    script = CLAIMED_RESULTS[attack].format(common=repo / ".git")
    spec = build_spec(
        repository=repo,
        candidates=[attacker("sly", script)],
        validate=["sh", "-c", "grep -qx fix fix.txt"],
        sandbox=SandboxSpec(isolation="bubblewrap"),
    )
    record = run_race(spec).candidates[0]
    if attack == "honest":
        assert record.status is CandidateStatus.WINNER, (record.error, record.validation)
        return
    assert record.status is CandidateStatus.FAILED
    assert record.error and "\n" not in record.error and "its work was not brought in" in record.error
    assert git(repo, "rev-parse", record.branch) == baseline


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attack", ["copied", "built on", "honest"])
def test_a_candidate_cannot_pass_a_rivals_result_off_as_its_own(repo, attack, mode):
    # It waits until the rival's result is on the rival's branch (read-only in its world when
    # fenced), then takes that commit as its own, or commits on top of it; the control does its
    # own work. Fenced, a commit it did not write is not brought in; either way, a result built
    # on a rival's commits is not graded.
    rival = "outpost/speculation/$OUTPOST_RACE_ID/honest/1"
    read = f"git --git-dir={repo / '.git'} rev-parse"
    wait = f'base=$({read} main); until [ "$({read} {rival})" != "$base" ]; do sleep 0.05; done'
    taken = {
        "copied": f"git reset -q --hard $({read} {rival})",
        "built on": f"git reset -q --hard $({read} {rival}) && echo more >> fix.txt && {COMMIT} more",
        "honest": f"echo mine > fix.txt && {COMMIT} mine",
    }[attack]
    result = race(
        repo,
        mode,
        attacker("honest", f"echo fix > fix.txt && {COMMIT} fix"),
        attacker("sly", f"{wait}; {taken}"),
        concurrency=2,
        select="best",
        score=["echo", "1"],
    )
    honest = next(r for r in result.candidates if r.key == "honest")
    sly = next(r for r in result.candidates if r.key == "sly")
    assert honest.status is CandidateStatus.WINNER
    if attack == "honest" or (attack == "copied" and mode == "none"):
        # unisolated, the very commit it took is its rival's, byte for byte: nothing tells it
        # from the same work done twice (docs/threat-model.md), and the tie goes to the rival
        assert sly.status is CandidateStatus.REJECTED and sly.score == 1, sly.to_json()
        return
    assert sly.status is CandidateStatus.FAILED and sly.score is None
    said = (
        "already in your repository"
        if attack == "copied"
        else f"built on honest#1's commit {honest.commit[:12]}"
    )
    assert said in sly.error


def test_the_same_commit_written_by_two_fenced_candidates_is_each_ones_own(repo):
    # Two deterministic programs (the same file, author and date on the same baseline) write the
    # same first commit; the second writes it once the first's result is on its branch, then adds
    # its own. What its own repository wrote is its own work: graded (the control, a commit it
    # took from its rival instead, is refused above).
    rival = "outpost/speculation/$OUTPOST_RACE_ID/first/1"
    read = f"git --git-dir={repo / '.git'} rev-parse"
    wait = f'base=$({read} main); until [ "$({read} {rival})" != "$base" ]; do sleep 0.05; done'
    fixed = "export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z"
    same = f"{fixed} && echo fix > fix.txt && {COMMIT} fix"
    result = race(
        repo,
        "bubblewrap",
        attacker("first", same),
        attacker("second", f"{wait}; {same} && echo more > more.txt && {COMMIT} more"),
        concurrency=2,
        select="best",
        score=["echo", "1"],
    )
    first, second = (next(r for r in result.candidates if r.key == key) for key in ("first", "second"))
    assert first.commits[0]["oid"] == second.commits[0]["oid"]  # the very same commit, written twice
    assert second.score == 1 and "built on" not in (second.error or ""), second.to_json()
    assert {first.status, second.status} == {CandidateStatus.WINNER, CandidateStatus.REJECTED}


# -- 2. the engine's git is not steerable by repository content -----------------------------------


def test_replace_refs_and_grafts_never_change_what_the_engine_reads(repo):
    first = git(repo, "rev-parse", "HEAD")
    (repo / "base.txt").write_text("second\n")
    git(repo, "commit", "-qam", "second")
    second = git(repo, "rev-parse", "HEAD")
    (repo / "base.txt").write_text("made up\n")
    git(repo, "commit", "-qam", "made up")
    made_up = git(repo, "rev-parse", "HEAD")
    git(repo, "reset", "-q", "--hard", second)
    git(repo, "replace", second, made_up)
    (repo / ".git" / "info" / "grafts").write_text(f"{second}\n")  # `second` made a root
    # control: plain git sees the history the repository makes up
    assert git(repo, "log", "-1", "--format=%s", second) == "made up"
    assert git(repo, "rev-list", "--count", second) == "1"
    # the engine's reads: the commits as they are
    head, commits = head_and_commits(repo, first)
    assert head == second and [c.subject for c in commits] == ["second"]


@pytest.mark.parametrize("mode", MODES)
def test_a_replace_ref_cannot_swap_the_graded_tree(repo, mode):
    # it commits a failing result, then points its commit at a passing one through a replace ref
    script = (
        f"echo bad > result.txt && {COMMIT} bad && bad=$(git rev-parse HEAD) && "
        f"echo good > result.txt && {COMMIT} good && good=$(git rev-parse HEAD) && "
        "git reset -q --hard $bad && git replace $bad $good && git show HEAD:result.txt > seen.txt"
    )
    spec = build_spec(
        repository=repo,
        candidates=[attacker("sly", script)],
        validate=["sh", "-c", "grep -qx good result.txt"],
        sandbox=SandboxSpec(isolation=mode),
    )
    result = run_race(spec)
    record = result.candidates[0]
    assert record.status is CandidateStatus.REJECTED  # graded on the tree its commit really has
    assert git(repo, "--no-replace-objects", "show", f"{record.commit}:result.txt") == "bad"
    if mode == "none":
        # control: the replace ref reached the user's repository, where plain git is fooled
        assert git(repo, "show", f"{record.commit}:result.txt") == "good"
    else:
        assert not git(repo, "for-each-ref", "refs/replace")


def test_drivers_in_the_repository_config_never_run_in_the_apps_merge(repo, tmp_path):
    marker = tmp_path / "driver-ran"
    for kind, key in (("merge", "driver"), ("filter", "smudge"), ("filter", "clean"), ("diff", "textconv")):
        git(repo, "config", f"{kind}.evil.{key}", f"touch {marker}; cat %A 2>/dev/null || cat")
    lines = repo / "lines.txt"
    lines.write_text("".join(f"line {n}\n" for n in range(1, 8)))
    git(repo, "add", "lines.txt")
    git(repo, "commit", "-qm", "lines")
    git(repo, "checkout", "-q", "-b", "candidate")
    # the candidate's commit names the drivers for every file; both sides change lines.txt apart,
    # so that the merge is clean and merges the file's content (where a merge driver would run)
    (repo / ".gitattributes").write_text("* merge=evil filter=evil diff=evil\n")
    lines.write_text(lines.read_text().replace("line 7", "the candidate's line 7"))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "candidate")
    candidate = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    lines.write_text(lines.read_text().replace("line 1", "the user's line 1"))
    git(repo, "commit", "-qam", "user")
    user = git(repo, "rev-parse", "HEAD")
    marker.unlink(missing_ok=True)
    outcome = merge_candidate(repo, candidate)
    assert outcome.done, outcome.message
    assert (
        lines.read_text().startswith("the user's line 1\n") and "the candidate's line 7" in lines.read_text()
    )
    assert not marker.exists()
    # control: the user's own git merge runs the planted drivers
    git(repo, "reset", "-q", "--hard", user)
    marker.unlink(missing_ok=True)
    git(repo, "merge", "-q", "--no-edit", candidate)
    assert marker.exists()


# -- 4. an attempt starts at the baseline ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_branch_planted_for_the_next_fallback_candidate_is_never_its_result(repo, mode):
    plant = (
        "echo planted > planted.txt && " + COMMIT + " planted && "
        'git branch "outpost/speculation/$OUTPOST_RACE_ID/next/1" HEAD; exit 1'
    )
    spec = build_spec(
        repository=repo,
        mode="fallback",
        candidates=[attacker("first", plant), attacker("next", f"echo real > real.txt && {COMMIT} real")],
        validate=["true"],
        sandbox=SandboxSpec(isolation=mode),
    )
    result = run_race(spec)
    second = next(r for r in result.candidates if r.key == "next")
    if mode == "bubblewrap":
        assert second.status is CandidateStatus.WINNER  # the plant stayed in first's own repository
        assert git(repo, "log", "-1", "--format=%s", second.branch) == "real"
    else:
        # unisolated, the plant is in the user's repository: refused, left as found, never graded
        assert result.status is RaceStatus.NO_WINNER
        assert second.status is CandidateStatus.FAILED
        assert "already exists at" in second.error and "left untouched" in second.error
        assert git(repo, "log", "-1", "--format=%s", second.branch) == "planted"


@pytest.mark.parametrize("kind", ["blob", "tree"])
def test_a_private_head_naming_a_blob_or_a_tree_is_not_brought_in(repo, kind):
    script = (
        f"echo fix > fix.txt && {COMMIT} fix && "
        + ("o=$(git rev-parse HEAD:fix.txt)" if kind == "blob" else "o=$(git rev-parse HEAD^{tree})")
        + ' && echo $o > "$(git rev-parse --git-dir)/HEAD"'
    )
    baseline = git(repo, "rev-parse", "HEAD")
    record = race(repo, "bubblewrap", attacker("sly", script)).candidates[0]
    assert record.status is CandidateStatus.FAILED
    assert "is not a commit: its work was not brought in" in record.error
    assert git(repo, "rev-parse", record.branch) == baseline


# -- what a replay finds of an earlier run -----------------------------------------------------------


def test_links_a_candidate_left_in_its_repository_are_never_followed_on_a_replay(repo, tmp_path):
    """A replayed attempt keeps its private repository (its refs may hold its commits) and gets
    its brief there again: a link the candidate left in place of either leads the engine nowhere."""
    from outpost_tui.engine import git as g
    from outpost_tui.engine.racing.briefing import GitPlace, write_brief

    users = tmp_path / "users-file"
    users.write_text("the user's\n")
    baseline = git(repo, "rev-parse", "HEAD")
    branch = g.branch_name("replayed", "sly", 1)
    directory = g.worktree_directory(repo, "sly", branch)
    g.add_worktree(repo, branch, directory, baseline)
    template = g.private_template(repo, g.listed_refs(repo))
    private = g.make_private(template, directory, baseline)
    # its brief swapped for a link to a file of the user's
    (private / "outpost-brief.md").symlink_to(users)
    write_brief(GitPlace.of(directory, fenced=True), "the brief")
    assert users.read_text() == "the user's\n"
    assert (private / "outpost-brief.md").read_text() == "the brief"
    # control: written through as a plain write would, the link reaches the user's file
    (private / "control.md").symlink_to(users)
    (private / "control.md").write_text("the brief")
    assert users.read_text() == "the brief"
    users.write_text("the user's\n")
    # its whole repository swapped for a link to the user's git directory
    shutil.rmtree(private)
    private.symlink_to(repo / ".git")
    again = g.make_private(template, directory, baseline)
    assert again == private and private.is_dir() and not private.is_symlink()
    assert (repo / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
