"""The headless end of a race: spend on the status line, how to merge a winner, why nobody won;
and a usage line only when the figures changed."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from outpost_tui.engine.core.events import Log, UsageReported
from outpost_tui.engine.core.model import RaceModel
from outpost_tui.progress import ProgressPrinter, finish_lines, spend
from tests.cli.support import fake_candidate, run_cli, write_race
from tests.conftest import git


def said(stderr: str) -> list[str]:
    """Progress lines without their [HH:MM:SS] stamp."""
    return [re.sub(r"^\[\d\d:\d\d:\d\d\] ", "", line) for line in stderr.splitlines()]


def test_a_winner_ends_with_its_spend_and_how_to_merge_it(repo, tmp_path: Path):
    race = write_race(
        tmp_path / "race.toml",
        repo,
        fake_candidate(
            "a", "--usage", "1000", "200", "0", "500", "--cost", "0.25", "--write", "a.txt", "--commit"
        ),
    )
    head = git(repo, "rev-parse", "HEAD")
    done = run_cli("run", race, "--json")
    assert done.returncode == 0, done.stderr
    branch = json.loads(done.stdout)["winner"]["branch"]
    lines = said(done.stderr)
    end = next(i for i, line in enumerate(lines) if line.startswith("race winner: a on "))
    assert f"{branch} at " in lines[end] and "1.7k tokens, $0.2500" in lines[end]
    commit = json.loads(done.stdout)["winner"]["commit"]
    assert lines[end + 1].startswith("  a#1 winner")
    # the merge hint names the commit that was graded, which no later move of the branch changes
    assert lines[end + 2] == f"merge it with: git -C {shlex.quote(str(repo))} merge {commit}"
    assert git(repo, "rev-parse", "HEAD") == head  # a hint: nothing was merged


def test_no_winner_ends_with_each_candidate_and_why(repo, tmp_path: Path):
    race = write_race(
        tmp_path / "race.toml",
        repo,
        fake_candidate("crashes", "--exit", "4")
        + fake_candidate("fails-tests", "--write", "b.txt", "--commit"),
        extra='mode = "fallback"',
        sections='[validate]\ncommand = ["false"]\n',
    )
    done = run_cli("run", race, "--headless")
    assert done.returncode == 1, done.stderr
    lines = said(done.stderr)
    end = next(i for i, line in enumerate(lines) if line.startswith("race no-winner in "))
    assert lines[end].endswith("no usage reported")
    assert lines[end + 1 :] == [
        "  crashes#1 failed: agent exited with code 4",
        "  fails-tests#1 rejected: validation failed (exit code 1)",
    ]


def test_the_spend_says_when_it_is_estimated_or_incomplete():
    result = {
        "status": "no-winner",
        "winner": None,
        "duration": 2.0,
        "candidates": [],
        "usage": {
            "input": 1500,
            "cached": 0,
            "cache_write": 0,
            "output": 500,
            "cost_usd": 0.5,
            "estimated": True,
            "complete": False,
        },
    }
    assert finish_lines(result) == [
        "race no-winner in 2.0s · 2.0k tokens, $0.5000 (estimated, incomplete: at least this much)"
    ]


def test_a_cost_nothing_could_price_is_unknown_never_zero():
    unknown = {
        "input": 1500,
        "cached": 0,
        "cache_write": 0,
        "output": 500,
        "cost_usd": 0.0,
        "estimated": True,
        "complete": True,
        "cost_unknown": True,
    }
    assert spend(unknown) == "2.0k tokens, cost unknown (estimated)"
    assert spend({**unknown, "cost_usd": 0.25}) == "2.0k tokens, $0.2500 + unknown (estimated)"


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines += text.splitlines()

    def flush(self) -> None:
        pass


def usage(model: RaceModel, output: int) -> None:
    total = {"input": 100, "cached": 0, "cache_write": 0, "output": output, "cost_usd": 0.0}
    model(UsageReported(key="a", attempt=1, delta=total, total=total, race_total=total))


def test_a_usage_line_is_printed_only_when_the_figures_change():
    model = RaceModel([("a", "command")])
    out = Lines()
    printer = ProgressPrinter(model, stream=out)
    printer.tick()
    assert out.lines == []  # nothing used yet
    usage(model, 50)
    printer.tick()
    assert len(out.lines) == 1 and "50 out" in out.lines[0]
    model(Log(key="a", attempt=1, stream="stdout", lines=["working", "still working"]))
    printer.tick()
    assert len(out.lines) == 1  # the model changed, the usage did not
    usage(model, 80)
    printer.tick()
    assert len(out.lines) == 2 and "80 out" in out.lines[1]


def test_setup_is_reported_headless_and_its_failure_ends_the_candidate(repo, tmp_path: Path):
    (repo / ".gitignore").write_text(".env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore .env")
    (repo / ".env").write_text("TOKEN=1\n")
    # select best: every candidate runs to its end, none is cancelled by another's win
    sections = (
        '[score]\ncommand = ["echo", "1"]\n[setup]\n'
        'command = ["sh", "-c", "test \\"$OUTPOST_CANDIDATE\\" = a || '
        '{ echo no libfoo >&2; exit 5; }"]\ncopy = [".env"]\nports = 1\n'
    )
    race = write_race(
        tmp_path / "race.toml",
        repo,
        fake_candidate("a", "--write", "a.txt", "--commit")
        + fake_candidate("b", "--write", "b.txt", "--commit"),
        extra='select = "best"',
        sections=sections,
    )
    done = run_cli("run", race, "--json")
    assert done.returncode == 0, done.stderr
    lines = said(done.stderr)
    assert any(re.fullmatch(r"a#1 setup passed in \d+\.\ds, copied 1 file\(s\)", line) for line in lines), (
        lines
    )
    assert any(
        line.startswith("b#1 failed: setup failed (exit 5): no libfoo (worktree kept: ") for line in lines
    ), lines
    result = json.loads(done.stdout)
    b = next(c for c in result["candidates"] if c["key"] == "b")
    assert b["setup"]["status"] == "failed" and b["setup"]["exit_code"] == 5
    assert len(b["setup"]["ports"]) == 1
