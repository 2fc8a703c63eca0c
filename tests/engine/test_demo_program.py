"""The demo agent program, run as a real subprocess in real git repositories, and the sample races.

Every test plays a script at OUTPOST_DEMO_PACE=0 unless it is about pacing, so nothing here waits on
the scripts' own pauses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from outpost_tui import cli
from outpost_tui.engine.agents.command import ProtocolDecoder
from outpost_tui.engine.core.events import EventKind
from outpost_tui.engine.core.spec import CandidateSpec
from outpost_tui.engine.racefile import load_race
from outpost_tui.samples import SampleError, list_samples, materialise, samples_root
from tests.agents.replay import path_with

PROGRAM = (sys.executable, "-m", "outpost_tui.engine.agents.demo_program")
IDENTITY = ("-c", "user.name=Test Owner", "-c", "user.email=owner@example.invalid")
TIMEOUT = 60
# Variables that would give git an identity no matter what its configuration says.
GIT_IDENTITY_VARIABLES = (
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
    "EMAIL",
)


def git(cwd: Path, *args: str, env: dict | None = None) -> str:
    result = subprocess.run(("git", *args), cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    directory = tmp_path / "repo"
    directory.mkdir()
    git(directory, "init", "-q", "-b", "main")
    (directory / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(directory, "add", "-A")
    git(directory, *IDENTITY, "commit", "-q", "-m", "initial")
    return directory


def base_env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in GIT_IDENTITY_VARIABLES and not key.startswith("OUTPOST_")
    }
    env["OUTPOST_DEMO_PACE"] = "0"
    env.update(extra)
    return env


def play(
    tmp_path: Path, cwd: Path, script: str, brief: bytes = b"brief", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    # The script lives outside the repository so `commit` steps never pick it up.
    path = tmp_path / "script.toml"
    path.write_text(script, encoding="utf-8")
    env = dict(env if env is not None else base_env())
    env["OUTPOST_BRIEF"] = brief.decode("utf-8")
    return subprocess.run(
        (*PROGRAM, str(path)), cwd=cwd, input=brief, env=env, capture_output=True, timeout=TIMEOUT
    )


def stdout_lines(result: subprocess.CompletedProcess) -> list[str]:
    return result.stdout.decode("utf-8").splitlines()


def messages(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in stdout_lines(result) if line.startswith("{")]


def commits(repo: Path) -> list[str]:
    return git(repo, "log", "--format=%s").splitlines()


def test_steps_speak_the_command_agent_protocol(tmp_path, repo):
    result = play(
        tmp_path,
        repo,
        """
[[steps]]
say = "Looking at calc.py"
[[steps]]
tool = "Read"
input = "calc.py"
output = "Read 2 lines"
[[steps]]
log = ["plain one", "plain two"]
[[steps]]
log = "plain three"
[[steps]]
usage = { input = 1200, cached = 300, cache_write = 40, output = 250, cost_usd = 0.0125 }
[[steps]]
usage = { output = 50, cost_usd = 0.0025 }
""",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    lines = stdout_lines(result)
    assert [json.loads(line) if line.startswith("{") else line for line in lines] == [
        {"kind": "text", "text": "Looking at calc.py"},
        {"kind": "tool", "name": "Read", "input": "calc.py"},
        "Read 2 lines",
        "plain one",
        "plain two",
        "plain three",
        {"kind": "usage", "input": 1200, "cached": 300, "cache_write": 40, "output": 250, "cost_usd": 0.0125},
        {"kind": "usage", "input": 0, "cached": 0, "cache_write": 0, "output": 50, "cost_usd": 0.0025},
    ]
    # The engine's own decoder reads it as intended: usage lines are deltas that add up.
    decoder = ProtocolDecoder(CandidateSpec(key="demo", agent="demo", brief="b", env={}))
    events = decoder.decode(lines)
    assert [event.kind for event in events] == [EventKind.TEXT, EventKind.TOOL, EventKind.LOG]
    assert events[2].data["lines"] == ["Read 2 lines", "plain one", "plain two", "plain three"]
    assert (decoder.usage.input, decoder.usage.cached, decoder.usage.cache_write, decoder.usage.output) == (
        1200,
        300,
        40,
        300,
    )
    assert decoder.usage.cost_usd == pytest.approx(0.015)


def test_write_replace_run_and_commit_change_the_repository(tmp_path, repo):
    result = play(
        tmp_path,
        repo,
        """
[[steps]]
write = { path = "notes/todo.txt", content = "fix add\\n" }
[[steps]]
replace = { path = "calc.py", old = "a - b", new = "a + b" }
[[steps]]
run = ["python3", "-c", "import calc,sys;print('add', calc.add(2, 3)); print('w', file=sys.stderr)"]
check = true
[[steps]]
commit = "Fix add"
[[steps]]
say = "done"
""",
    )
    assert result.returncode == 0, result.stderr
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (repo / "notes/todo.txt").read_text() == "fix add\n"
    lines = stdout_lines(result)
    # The subprocess's stdout and stderr arrive as log lines, followed by its exit code.
    assert lines[:3] == ["add 5", "w", "[exit 0] python3 -c " + lines[2].split(" -c ", 1)[1]]
    assert commits(repo) == ["Fix add", "initial"]
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "show", "--format=", "--name-only", "HEAD").split() == ["calc.py", "notes/todo.txt"]
    assert messages(result)[-1] == {"kind": "text", "text": "done"}


def test_commit_uses_the_configured_identity_when_there_is_one(tmp_path, repo):
    git(repo, "config", "user.name", "Configured Person")
    git(repo, "config", "user.email", "configured@example.invalid")
    result = play(
        tmp_path,
        repo,
        """
[[steps]]
write = { path = "a.txt", content = "a" }
[[steps]]
commit = "With identity"
""",
    )
    assert result.returncode == 0, result.stderr
    assert git(repo, "log", "-1", "--format=%an <%ae>") == "Configured Person <configured@example.invalid>\n"


def test_commit_works_without_any_git_identity(tmp_path, repo):
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_CONFIG_NOSYSTEM="1",
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
    )
    assert (
        subprocess.run(
            ("git", "config", "--get", "user.name"), cwd=repo, env=env, capture_output=True
        ).returncode
        != 0
    )
    result = play(
        tmp_path,
        repo,
        """
[[steps]]
write = { path = "a.txt", content = "a" }
[[steps]]
commit = "Without identity"
""",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert commits(repo) == ["Without identity", "initial"]
    assert git(repo, "log", "-1", "--format=%an <%ae>") == "demo-agent <demo@outpost.invalid>\n"


def test_commit_with_nothing_to_commit_fails_clearly(tmp_path, repo):
    result = play(tmp_path, repo, '[[steps]]\ncommit = "Nothing"\n[[steps]]\nsay = "after"\n')
    assert result.returncode == 3
    stderr = result.stderr.decode().splitlines()
    assert len(stderr) == 1 and "steps[1] (commit): git commit failed" in stderr[0]
    assert messages(result) == []
    assert commits(repo) == ["initial"]


def test_replace_of_missing_text_exits_3_naming_the_step(tmp_path, repo):
    result = play(
        tmp_path,
        repo,
        """
[[steps]]
replace = { path = "calc.py", old = "a * b", new = "a + b" }
[[steps]]
say = "not reached"
""",
    )
    assert result.returncode == 3
    stderr = result.stderr.decode().splitlines()
    assert len(stderr) == 1
    assert "steps[1] (replace)" in stderr[0] and "'a * b' not found in calc.py" in stderr[0]
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert result.stdout == b""


def test_replace_of_missing_file_exits_3(tmp_path, repo):
    script = '[[steps]]\nreplace = { path = "nope.py", old = "a", new = "b" }\n'
    result = play(tmp_path, repo, script)
    assert result.returncode == 3
    assert b"nope.py does not exist" in result.stderr


def test_run_records_failure_and_check_ends_the_session_with_its_code(tmp_path, repo):
    result = play(
        tmp_path,
        repo,
        """
[[steps]]
run = ["python3", "-c", "print('first'); raise SystemExit(4)"]
[[steps]]
say = "carried on"
[[steps]]
run = ["python3", "-c", "raise SystemExit(5)"]
check = true
[[steps]]
say = "not reached"
""",
    )
    assert result.returncode == 5
    lines = stdout_lines(result)
    assert lines[0] == "first" and lines[1].startswith("[exit 4] ")
    assert [m["text"] for m in messages(result)] == ["carried on"]


def test_run_of_a_missing_program_is_exit_127(tmp_path, repo):
    result = play(tmp_path, repo, '[[steps]]\nrun = ["no-such-program-xyz"]\ncheck = true\n')
    assert result.returncode == 127
    assert "no-such-program-xyz: command not found" in stdout_lines(result)


def test_quota_prints_a_quota_line_with_a_future_reset_and_exits_1(tmp_path, repo):
    before = datetime.now(UTC)
    result = play(
        tmp_path,
        repo,
        """
[[steps]]
say = "working"
[[steps]]
quota = "You've hit your usage limit"
reset_in = 3600
[[steps]]
say = "not reached"
""",
    )
    assert result.returncode == 1
    quota = messages(result)[-1]
    assert quota["kind"] == "quota" and quota["message"] == "You've hit your usage limit"
    reset_at = datetime.fromisoformat(quota["reset_at"])
    assert reset_at.tzinfo is not None and reset_at.utcoffset().total_seconds() == 0
    assert 3590 <= (reset_at - before).total_seconds() <= 3700
    assert len(messages(result)) == 2


def test_quota_without_reset_time(tmp_path, repo):
    result = play(tmp_path, repo, '[[steps]]\nquota = "limit"\n')
    assert result.returncode == 1
    assert messages(result) == [{"kind": "quota", "message": "limit"}]


def test_exit_step_ends_with_its_code(tmp_path, repo):
    script = '[[steps]]\nsay = "a"\n[[steps]]\nexit = 7\n[[steps]]\nsay = "b"\n'
    result = play(tmp_path, repo, script)
    assert result.returncode == 7
    assert [m["text"] for m in messages(result)] == ["a"]


@pytest.mark.parametrize(
    "script, fragment",
    [
        (None, "script not found"),
        ("[[steps]\nsay = 1", "invalid TOML"),
        ("[[steps]]\nbogus = 1\n", "steps[1]: a step needs exactly one of"),
        ('[[steps]]\nsay = "a"\nlog = "b"\n', "found say, log"),
        ('[[steps]]\nsay = "a"\ncheck = true\n', "steps[1]: unknown key 'check'"),
        ('[[steps]]\nsay = "ok"\n[[steps]]\npause = "long"\n', "steps[2] (pause): 'pause' must be"),
        ("[[steps]]\nusage = { output = -1 }\n", "'usage.output' must be a whole number"),
        ('[[steps]]\nreplace = { path = "a", old = "x" }\n', "'replace' needs 'new'"),
        ('[[steps]]\nwait = "a while"\n', "'wait' must be \"forever\""),
        ("[session]\npace = -1\n", "'session.pace' must be a number >= 0"),
        ("[sessions]\npace = 1\n", "unknown key 'sessions'"),
    ],
)
def test_bad_script_is_one_line_on_stderr_and_exit_2(tmp_path, repo, script, fragment):
    path = tmp_path / "bad.toml"
    if script is not None:
        path.write_text(script)
    result = subprocess.run(
        (*PROGRAM, str(path)), cwd=repo, input=b"brief", env=base_env(), capture_output=True, timeout=TIMEOUT
    )
    assert result.returncode == 2
    assert result.stdout == b""
    stderr = result.stderr.decode().splitlines()
    assert len(stderr) == 1, stderr
    assert stderr[0].startswith("demo_program: ") and fragment in stderr[0]
    assert "Traceback" not in result.stderr.decode()


def test_bad_pace_in_the_environment_is_exit_2(tmp_path, repo):
    result = play(tmp_path, repo, '[[steps]]\nsay = "a"\n', env=base_env(OUTPOST_DEMO_PACE="fast"))
    assert result.returncode == 2
    assert result.stderr.decode().count("\n") == 1 and b"OUTPOST_DEMO_PACE" in result.stderr


def test_brief_is_echoed_byte_for_byte_and_never_through_a_shell(tmp_path, repo):
    brief = (
        'Fix "add" in calc.py; don\'t touch `subtract`.\n'
        "$(touch pwned) `touch pwned2` $HOME ${PATH} \\n literal\n"
        "$(rm -rf /)\n\tindented — ünïcödé ✓ 日本語 🚀\r\nlast line without newline"
    ).encode()
    result = play(tmp_path, repo, '[[steps]]\necho_brief = true\nto = "brief-copy.txt"\n', brief=brief)
    assert result.returncode == 0, result.stderr
    assert messages(result) == [{"kind": "text", "text": brief.decode("utf-8")}]
    assert (repo / "brief-copy.txt").read_bytes() == brief
    assert not (repo / "pwned").exists() and not (repo / "pwned2").exists()


def test_empty_brief_is_echoed_as_empty(tmp_path, repo):
    result = play(tmp_path, repo, "[[steps]]\necho_brief = true\n", brief=b"")
    assert messages(result) == [{"kind": "text", "text": ""}]


def test_pace_scales_pauses_and_the_environment_overrides_the_script(tmp_path, repo):
    script = '[session]\npace = 100.0\n[[steps]]\npause = 30\n[[steps]]\nsay = "woke"\n'
    started = time.monotonic()
    result = play(tmp_path, repo, script, env=base_env(OUTPOST_DEMO_PACE="0.01"))
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    # 30 s × 0.01 = 0.3 s: the script's own pace (100) would have taken 50 minutes.
    assert 0.3 <= elapsed < TIMEOUT
    assert messages(result) == [{"kind": "text", "text": "woke"}]


def test_spam_prints_numbered_lines_in_order(tmp_path, repo):
    result = play(tmp_path, repo, '[[steps]]\nspam = 5000\n[[steps]]\nsay = "end"\n')
    assert result.returncode == 0, result.stderr
    lines = stdout_lines(result)
    assert len(lines) == 5001
    assert [int(line.split()[1].split("/")[0]) for line in lines[:-1]] == list(range(1, 5001))
    assert all(line.split()[1].endswith("/5000") for line in lines[:-1])
    assert json.loads(lines[-1]) == {"kind": "text", "text": "end"}


def _start_hung_agent(tmp_path: Path, repo: Path, **popen) -> subprocess.Popen:
    script = tmp_path / "hang.toml"
    script.write_text('[[steps]]\nsay = "started"\n[[steps]]\nwait = "forever"\n')
    child = subprocess.Popen(
        (*PROGRAM, str(script)),
        cwd=repo,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=base_env(),
        **popen,
    )
    child.stdin.write(b"brief")
    child.stdin.close()
    first = child.stdout.readline()
    assert json.loads(first) == {"kind": "text", "text": "started"}
    return child


def test_sigterm_stops_a_hung_session_promptly(tmp_path, repo):
    child = _start_hung_agent(tmp_path, repo)
    try:
        child.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert child.wait(timeout=5) == -signal.SIGTERM
        assert time.monotonic() - started < 5
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()


def test_sigterm_stops_it_even_when_the_parent_ignored_sigterm(tmp_path, repo):
    # An ignored disposition is inherited across exec; the agent must still be cancellable.
    child = _start_hung_agent(
        tmp_path, repo, preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)
    )
    try:
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=5) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()


# --- sample races -----------------------------------------------------------------------------


def test_samples_are_listed():
    assert list_samples() == ["claude-vs-codex", "fallback", "race"]


def test_no_sample_directory_is_a_git_repository():
    root = samples_root()
    assert not list(root.rglob(".git"))


@pytest.mark.parametrize("name", ["race", "fallback"])
def test_materialise_writes_a_runnable_race_on_a_fresh_repository(tmp_path, name):
    target = tmp_path / "demo"
    race_file = materialise(name, target)
    assert race_file == target.absolute() / "race.toml" and race_file.is_file()
    assert not (target / "sample.toml").exists()
    project = target / "project"
    assert git(project, "rev-list", "--count", "HEAD") == "1\n"
    assert git(project, "rev-parse", "--abbrev-ref", "HEAD") == "main\n"
    assert git(project, "status", "--porcelain", "--ignored") == ""
    # The bug is real: the project's own tests fail at the committed baseline.
    tests = subprocess.run(
        ("python3", "-m", "unittest", "-q"), cwd=project, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert tests.returncode == 1
    assert "FAILED" in tests.stderr and "test_adds_integers" in tests.stderr
    spec = load_race(race_file)
    assert spec.repository == project.resolve()
    assert spec.budget.attempts == 3 and spec.budget.tokens.output == 200000
    assert spec.budget.cost_usd == 5
    assert spec.validate.command == ("python3", "-B", "-m", "unittest", "-q")
    # The brief is stated once, in [race], and every candidate gets it.
    assert spec.brief and "Fix add() in calc.py" in spec.brief
    assert race_file.read_text().count("Fix add() in calc.py") == 1
    assert all(candidate.brief == spec.brief for candidate in spec.candidates)
    for candidate in spec.candidates:
        if candidate.agent == "demo":
            assert candidate.script is not None and candidate.script.is_file()
            assert candidate.script.is_relative_to(target.resolve())


def test_materialise_refuses_a_non_empty_directory_and_leaves_it_alone(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    with pytest.raises(SampleError, match="not empty"):
        materialise("race", target)
    assert [path.name for path in target.iterdir()] == ["precious.txt"]
    assert (target / "precious.txt").read_text() == "keep me"


def test_materialise_into_an_existing_empty_directory(tmp_path):
    target = tmp_path / "empty"
    target.mkdir()
    assert materialise("race", target).is_file()


def test_materialise_of_an_unknown_sample_names_the_known_ones(tmp_path):
    with pytest.raises(
        SampleError, match=r"unknown sample 'nope' \(available: claude-vs-codex, fallback, race\)"
    ):
        materialise("nope", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def _play_candidate(tmp_path: Path, project: Path, candidate, pace: str = "0") -> tuple[int, int]:
    """Plays one demo candidate in its own worktree as the engine would; returns (agent exit,
    validation exit)."""
    worktree = tmp_path / f"wt-{candidate.key}"
    git(project, "worktree", "add", "-q", "-b", f"try/{candidate.key}", str(worktree), "main")
    env = base_env(OUTPOST_DEMO_PACE=pace, OUTPOST_BRIEF=candidate.brief)
    agent = subprocess.run(
        (*PROGRAM, str(candidate.script)),
        cwd=worktree,
        input=candidate.brief.encode(),
        env=env,
        capture_output=True,
        timeout=TIMEOUT,
    )
    validation = subprocess.run(
        ("python3", "-m", "unittest", "-q"), cwd=worktree, capture_output=True, timeout=TIMEOUT
    )
    return agent.returncode, validation.returncode


def _pauses(script: Path) -> float:
    steps = tomllib.loads(script.read_text())["steps"]
    return sum(step.get("pause", 0) for step in steps)


def test_race_sample_plays_out_as_described(tmp_path):
    spec = load_race(materialise("race", tmp_path / "race"))
    assert spec.mode == "race"
    by_key = {candidate.key: candidate for candidate in spec.candidates}
    assert list(by_key) == ["fixer", "breaker", "slow"]
    project = spec.repository
    outcomes = {key: _play_candidate(tmp_path, project, candidate) for key, candidate in by_key.items()}
    assert outcomes["fixer"] == (0, 0)  # accepted
    assert outcomes["breaker"] == (0, 1)  # committed, then rejected by validation
    assert outcomes["slow"] == (0, 0)  # would win too, but only after the fixer
    for key in by_key:
        assert len(git(project, "rev-list", f"main..try/{key}").split()) == 1
    # The fixer wins at pace 1 after ~5 s; the breaker is rejected before; the slow one lags far.
    assert 4 <= _pauses(by_key["fixer"].script) <= 6
    assert _pauses(by_key["breaker"].script) < _pauses(by_key["fixer"].script)
    assert 25 <= _pauses(by_key["slow"].script) <= 35


def test_fallback_sample_plays_out_as_described(tmp_path):
    spec = load_race(materialise("fallback", tmp_path / "fallback"))
    assert spec.mode == "fallback"
    first, hasty, careful = spec.candidates
    assert first.agent == "command" and first.command[0] == "claude-nonexistent-9"
    assert hasty.agent == careful.agent == "demo"
    assert _play_candidate(tmp_path, spec.repository, hasty) == (0, 1)
    assert _play_candidate(tmp_path, spec.repository, careful) == (0, 0)


def test_sample_command_lists_and_writes(tmp_path, capsys):
    assert cli.main(["sample"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listing[:3]] == ["claude-vs-codex", "fallback", "race"]
    target = tmp_path / "from-cli"
    assert cli.main(["sample", "race", str(target)]) == 0
    out = capsys.readouterr().out
    assert str(target / "race.toml") in out
    assert f"outpost-tui run {target / 'race.toml'} --headless" in out
    assert cli.main(["sample", "race", str(target)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "not empty" in err[0]
    assert cli.main(["sample", "race"]) == 2
    assert "needs a DIR" in capsys.readouterr().err


def _outpost(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        (sys.executable, "-m", "outpost_tui.cli", *args),
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_the_real_agents_sample_is_written_and_doctor_names_the_missing_agents(tmp_path):
    target = tmp_path / "real"
    written = _outpost("sample", "claude-vs-codex", str(target))
    assert written.returncode == 0, written.stderr
    race_file = target / "race.toml"
    assert f"outpost-tui run {race_file} --headless" in written.stdout
    spec = load_race(race_file)
    assert spec.repository == (target / "project").resolve()
    assert [(c.key, c.agent) for c in spec.candidates] == [("claude", "claude"), ("codex", "codex")]
    assert git(spec.repository, "rev-list", "--count", "HEAD") == "1\n"
    # The project's own tests fail at the baseline: there is a bug for the agents to fix.
    tests = subprocess.run(
        ("python3", "-m", "unittest", "-q"),
        cwd=spec.repository,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert tests.returncode == 1 and "test_adds_integers" in tests.stderr

    # A machine without either program: doctor exits 9 and names both.
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = {key: value for key, value in base_env().items() if not key.endswith("_API_KEY")}
    env.update(PATH=path_with(empty_bin), HOME=str(tmp_path), DOCKER_HOST="unix:///nonexistent.sock")
    checked = _outpost("doctor", str(race_file), "--json", env=env)
    assert checked.returncode == 9, checked.stderr
    assert json.loads(checked.stdout)["missing"] == ["agent claude", "agent codex"]
    plain = _outpost("doctor", str(race_file), env=env)
    assert plain.returncode == 9
    assert plain.stdout.strip().splitlines()[-1] == f"{race_file}: missing agent claude, agent codex"
    assert "`claude` not found on PATH (install: npm install -g @anthropic-ai/claude-code)" in plain.stdout


def test_doctor_on_a_sample_where_it_ships_says_to_write_it_first():
    shipped = samples_root() / "claude-vs-codex" / "race.toml"
    done = _outpost("doctor", str(shipped))
    assert done.returncode == 2
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert "is the 'claude-vs-codex' sample" in done.stderr
    assert "`outpost-tui sample claude-vs-codex DIR`, then `outpost-tui doctor DIR/race.toml`" in done.stderr


@pytest.mark.parametrize("name", ["race", "fallback"])
def test_a_sample_run_removes_the_winners_worktree_even_where_python_writes_bytecode(tmp_path, name):
    # A normal machine lets Python write __pycache__ (ignored files) beside what it imports, and a
    # worktree holding ignored files is kept: the sample's commands must not leave any behind.
    race_file = materialise(name, tmp_path / name)
    env = {key: value for key, value in base_env().items() if key != "PYTHONDONTWRITEBYTECODE"}
    done = _outpost("run", str(race_file), "--headless", "--json", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    winner = next(c for c in result["candidates"] if c["status"] == "winner")
    assert winner["retained_directory"] is None and winner["cleanup"] == "done"
    assert winner["directory"] and not Path(winner["directory"]).exists()
