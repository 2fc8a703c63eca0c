"""Isolation by construction in a container, tried as an attacker would: each attack runs in a real
race in a container (it must change nothing the user owns) and, as its control, unisolated on the
host (the same attack reaches its target, so the test would see it if the container let it
through). A container mounts its checkout, its own repository (in place of the repository's
worktree git directories) and the repository's objects, read-only: nothing else of `.git`."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from outpost_tui.engine import CandidateSpec, CandidateStatus, build_spec, run_race
from outpost_tui.engine.core.spec import SandboxSpec
from outpost_tui.engine.sandbox.container_engine import list_containers
from tests.conftest import git, make_repo

from .conftest import IMAGE

pytestmark = pytest.mark.container

MODES = ["container", "none"]
COMMIT = "git add -A && git -c user.name=c -c user.email=c@x commit -qm"


@pytest.fixture
def repo(tmp_path) -> Path:
    root = make_repo(tmp_path / "repo")
    git(root, "branch", "other")
    git(root, "tag", "v1")
    return root


def sandbox(mode: str) -> SandboxSpec:
    if mode == "container":
        return SandboxSpec(provider="podman", image=IMAGE)
    return SandboxSpec(isolation="none")


def attacker(key: str, script: str) -> CandidateSpec:
    return CandidateSpec(key, "command", "win", command=("sh", "-c", script))


def race(repo: Path, mode: str, *candidates: CandidateSpec, validate=("true",), on_event=None, **options):
    spec = build_spec(
        repository=repo,
        candidates=list(candidates),
        validate=list(validate),
        sandbox=sandbox(mode),
        **options,
    )
    result = run_race(spec, on_event=on_event)
    assert list_containers(result.id) == []
    return result


def refs(repo: Path) -> dict[str, str]:
    """The user's refs: everything but the engine's own (attempt branches, pins)."""
    listed = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    engines = ("refs/heads/outpost/", "refs/outpost/validated/")
    return dict(line.split(" ", 1) for line in listed.splitlines() if not line.startswith(engines))


@pytest.mark.parametrize("mode", MODES)
def test_git_commands_in_a_container_never_reach_the_users_refs(engine, repo, mode):
    before = refs(repo)
    script = " && ".join(
        [
            f"echo fix > fix.txt && {COMMIT} fix",
            "git update-ref refs/heads/main HEAD",  # the user's branch onto its commit
            "git branch -f other HEAD",
            "git branch planted HEAD",
            "git tag -f v1 HEAD",
            "git update-ref refs/outpost/archive/forged HEAD",
            "git replace $(git rev-parse HEAD~1) HEAD",
            "git update-ref refs/heads/outpost/elsewhere/rival/1 HEAD",
            # and its own repository's config: hooks and an fsmonitor, the engine's git never reads
            "git config core.fsmonitor 'touch /tmp/pwned' && git config core.hooksPath /tmp",
        ]
    )
    result = race(repo, mode, attacker("boxed", script))
    record = result.candidates[0]
    if mode == "container":
        assert refs(repo) == before  # never touched: nothing to report, nothing to undo
        assert result.tampering == []
        assert record.status is CandidateStatus.WINNER  # its own branch holds its honest commit
        assert git(repo, "log", "-1", "--format=%s", record.branch) == "fix"
        assert "fsmonitor" not in (repo / ".git" / "config").read_text()
        assert result.integration["status"] == "clean"
    else:
        reported = " ".join(str(entry) for entry in result.tampering)
        for name in ("refs/heads/main", "refs/heads/planted", "refs/tags/v1", "refs/replace/"):
            assert name in reported


@pytest.mark.parametrize("mode", MODES)
def test_writes_into_the_users_git_directory_and_records_do_not_land(engine, repo, mode):
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
            # what it can see of the repository's git directory and of the records
            f"ls -A {shlex.quote(str(common))} > seen-git.txt",
            f"ls -A {shlex.quote(str(common / 'worktrees'))} > seen-worktrees.txt",
            f"ls -A {shlex.quote(str(repo / '.outpost'))} > seen-records.txt 2>&1",
            *(
                f"( mkdir -p {shlex.quote(str(p.parent))}; chmod u+w {shlex.quote(str(p))}; "
                f"echo pwned >> {shlex.quote(str(p))} ) 2>/dev/null"
                for p in targets.values()
            ),
            f"echo ok > ok.txt && {COMMIT} ok",
        ]
    )
    result = race(repo, mode, attacker("boxed", script))
    record = result.candidates[0]
    after = {name: path.read_bytes() if path.is_file() else None for name, path in targets.items()}
    if mode == "container":
        assert after == contents  # what it wrote stayed in the container's own files
        assert record.status is CandidateStatus.WINNER

        def seen(name: str) -> list[str]:
            return git(repo, "show", f"{record.commit}:{name}").split()

        assert sorted(seen("seen-git.txt")) == ["objects", "worktrees"]  # no refs, config, hooks
        assert seen("seen-worktrees.txt") == [Path(record.directory).name]  # its own repository
        assert seen("seen-records.txt") == ["workspaces"]  # no runs, cache, archives, keys
    else:
        assert after["records"] == b"pwned\n"  # control: each write landed on the host
        assert after["user's file"] != contents["user's file"]


@pytest.mark.parametrize("mode", MODES)
def test_a_candidate_in_a_container_cannot_write_into_its_rivals_worktree(engine, repo, mode):
    # the attacker goes once both worktrees exist; the rival once the attacker is done
    workspaces = repo / ".outpost" / "workspaces"
    wait = "until [ -e gate ]; do sleep 0.05; done; rm gate; "
    attack = (
        f'{wait}for w in {workspaces}/*; do [ "$w" = "$PWD" ] || echo pwned > "$w/pwned.txt"; '
        f"done 2>/dev/null; ls {workspaces} > seen.txt; {COMMIT} attack"
    )
    rival = f"{wait}echo real > real.txt && {COMMIT} real"
    directories: dict[str, Path] = {}

    def on_event(event) -> None:
        if event.kind.value == "worktree-ready":
            directories[event.key] = Path(event.directory)
            if len(directories) == 2:
                (directories["sly"] / "gate").touch()
        elif event.kind.value == "settled" and event.key == "sly":
            (directories["honest"] / "gate").touch()

    result = race(
        repo,
        mode,
        attacker("sly", attack),
        attacker("honest", rival),
        concurrency=2,
        select="best",
        score=["echo", "1"],
        on_event=on_event,
    )
    honest = next(r for r in result.candidates if r.key == "honest")
    sly = next(r for r in result.candidates if r.key == "sly")
    files = git(repo, "ls-tree", "-r", "--name-only", honest.commit).split()
    seen = git(repo, "show", f"{sly.commit}:seen.txt").split()
    if mode == "container":
        assert files == ["base.txt", "real.txt"]
        assert seen == [Path(sly.directory).name]  # its own worktree alone
    else:
        assert "pwned.txt" in files
        assert len(seen) >= 2


@pytest.mark.parametrize("mode", MODES)
def test_what_validation_does_to_git_in_its_container_stays_in_its_checkout(engine, repo, mode):
    before = refs(repo)
    check = (
        "git -c user.name=v -c user.email=v@x commit -q --allow-empty -m checked && "
        "git update-ref refs/heads/main HEAD && git tag -f planted-by-validation HEAD"
    )
    result = race(
        repo, mode, attacker("honest", f"echo fix > fix.txt && {COMMIT} fix"), validate=("sh", "-c", check)
    )
    record = result.candidates[0]
    assert record.validation.status == "passed", record.validation.to_json()  # its git works there
    if mode == "container":
        assert refs(repo) == before
        assert result.tampering == []
    else:
        assert refs(repo) != before  # control: the grading checkout's git is the user's


def test_a_repository_that_borrows_its_objects_works_in_a_container(engine, tmp_path):
    # `git clone --shared`: the repository's commits live in another's object directory, which
    # its objects/info/alternates names; a container sees that directory too, read-only
    origin = make_repo(tmp_path / "origin")
    repo = tmp_path / "shared"
    git(tmp_path, "clone", "-q", "--shared", str(origin), str(repo))
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.invalid")
    assert (repo / ".git" / "objects" / "info" / "alternates").is_file()
    reads = attacker("honest", f"git log -1 --format=%s > seen.txt && {COMMIT} mine")
    result = race(repo, "container", reads)
    record = result.candidates[0]
    assert record.status is CandidateStatus.WINNER, record.error
    assert git(repo, "show", f"{record.commit}:seen.txt") == "initial"  # its git read the borrowed history
