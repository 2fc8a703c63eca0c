"""The guard's report stays bounded and names what matters first. A candidate running unisolated
(the fallback where it shares the user's git directory) moves one of the user's branches and
buries it under twenty thousand junk refs, made in one `git update-ref --stdin`. The report, in
the event, the result JSON and on stderr, is capped: the moved branch first, the rest counted in
one entry whose evidence file lists every change with its undo; the moved branch's undo still
puts it back. The control: the same move without the junk is reported whole, with no count."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.cli.support import run_cli, write_race
from tests.cli.test_repository_guard import shell_candidate
from tests.conftest import git

JUNK = 20_000
MAX_REPORTED = 50  # docs/result.md: one check reports at most 50 changes


def vandal(junk: int) -> str:
    move = 'git update-ref refs/heads/feature "$(git commit-tree HEAD^{tree} -m orphan)"'
    if not junk:
        return f"{move} && exit 1"
    refs = f"seq 1 {junk} | sed 's|.*|create refs/junk/& HEAD|' | git update-ref --stdin"
    return f"{move} && {refs} && exit 1"


def race(repo: Path, tmp_path: Path, junk: int):
    git(repo, "branch", "feature")
    before = git(repo, "rev-parse", "refs/heads/feature")
    path = write_race(
        tmp_path / "race.toml",
        repo,
        shell_candidate("vandal", vandal(junk)),
        sections='[validate]\ncommand = ["true"]\n\n[sandbox]\nisolation = "none"\n',
    )
    done = run_cli("run", path, "--headless", "--json", cwd=repo, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done, json.loads(done.stdout), before


def test_twenty_thousand_junk_refs_do_not_bury_the_moved_branch(repo, tmp_path):
    done, result, before = race(repo, tmp_path, JUNK)

    report = result["tampering"]
    assert len(report) == MAX_REPORTED
    assert len(json.dumps(report)) < 64 * 1024
    # the user's branch first, the junk after it, the rest counted
    first = report[0]
    assert (first["kind"], first["name"], first["change"]) == ("ref", "refs/heads/feature", "moved")
    more = report[-1]
    rest = JUNK + 1 - (MAX_REPORTED - 1)
    assert more["kind"] == "more" and more["name"].startswith(
        f"{rest:,} more changes ({rest:,} refs created)"
    )
    listed = Path(more["evidence"]).read_text().splitlines()
    assert len(listed) == JUNK + 1 and listed[0].startswith("moved refs/heads/feature")
    assert sum("update-ref -d refs/junk/" in line for line in listed) == JUNK
    # on stderr: bounded, and the moved branch is the first change named
    changed = [line for line in done.stderr.splitlines() if "CHANGED YOUR REPOSITORY" in line]
    assert len(changed) == MAX_REPORTED and "moved refs/heads/feature" in changed[0]
    assert f"and {rest:,} more changes" in changed[-1]
    assert len(done.stderr) < 64 * 1024
    # the flight log's event is bounded too
    events = (repo / ".outpost" / "runs" / result["id"]).glob("*.jsonl")
    tampering = [
        line for log in events for line in log.read_bytes().splitlines() if b'"kind":"tampering"' in line
    ]
    assert tampering and all(len(line) < 64 * 1024 for line in tampering)
    # and the undo still puts the branch back
    subprocess.run(first["undo"], shell=True, check=True, capture_output=True)
    assert git(repo, "rev-parse", "refs/heads/feature") == before


def test_control_the_same_move_alone_is_reported_whole(repo, tmp_path):
    done, result, before = race(repo, tmp_path, 0)

    report = result["tampering"]
    assert [(t["kind"], t["name"], t["change"]) for t in report] == [("ref", "refs/heads/feature", "moved")]
    assert "vandal#1 CHANGED YOUR REPOSITORY: moved refs/heads/feature" in done.stderr
    assert "more changes" not in done.stderr
    subprocess.run(report[0]["undo"], shell=True, check=True, capture_output=True)
    assert git(repo, "rev-parse", "refs/heads/feature") == before
