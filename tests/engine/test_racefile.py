"""The race file: every rule of docs/race-file.md, with the line and key each error names."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from outpost_tui.engine import agents
from outpost_tui.engine.agents.command import CommandAgent
from outpost_tui.engine.core import spec
from outpost_tui.engine.core.spec import (
    MAX_CANDIDATES,
    BudgetSpec,
    DurabilitySpec,
    Price,
    SandboxSpec,
    ScoreSpec,
    TokenLimits,
    ValidateSpec,
)
from outpost_tui.engine.racefile import RaceFileError, dump_race, load_race, load_race_text


def CandidateSpec(**fields) -> spec.CandidateSpec:
    # env given explicitly: spec.frozen_map() needs an argument, so the default_factory fails.
    return spec.CandidateSpec(**{"env": {}, **fields})


def RaceSpec(**fields) -> spec.RaceSpec:
    return spec.RaceSpec(**{"prices": {}, **fields})


GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


def make_repo(path: Path, commit: bool = True) -> Path:
    path.mkdir(parents=True)
    subprocess.run([*GIT, "init", "-q", "-b", "main", str(path)], check=True)
    if commit:
        (path / "README").write_text("hello\n")
        subprocess.run([*GIT, "-C", str(path), "add", "README"], check=True)
        subprocess.run([*GIT, "-C", str(path), "commit", "-q", "-m", "init"], check=True)
    return path


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return make_repo(tmp_path_factory.mktemp("shared") / "repo")


FULL = '''\
# a race on the sample repository
[race]
name = "fix-parser"
repository = "repo"
base = "main"
mode = "race"
select = "best"
concurrency = 3
run_id = "run-1.a"
cleanup_timeout = 12.5

[budget]
attempts = 6
tokens = { input = 100000, cached = 50000, cache_write = 2000, output = 20000 }
cost_usd = 2
candidate_timeout = 900

[validate]
command = [
    "python", "-m",  # a comment with ] and [race] in it
    "pytest",
]
timeout = 120
require_commits = false

[score]
command = ["python", "score.py"]
timeout = 30

[sandbox]
provider = "podman"
image = "python:3.11-slim"
network = "bridge"
endpoint = "unix:///run/podman.sock"
memory = "2g"
cpus = 1.5
pids = 256

[durability]
enabled = true
version = "2"
resume = "retry-incomplete"

[prices."claude-sonnet/4.5"]
input = 3
cached = 0.3
cache_write = 3.75
output = 15

[[candidates]]
key = "claude-1"
agent = "command"
command = ["python", "agent.py", "--fast"]
brief = """
Fix the parser.
[[candidates]]
key = "not-a-candidate"
"""
model = "sonnet"
env = { LEVEL = "3", "ODD NAME" = "x" }
timeout = 300
max_turns = 40
allowed_tools = ["Read", "Edit"]
args = ["--verbose"]

[[candidates]]
key = "demo_2"
agent = "demo"
script = "scripts/session.jsonl"
brief_file = "briefs/task.md"

[candidates.env]
MODE = "replay"
'''


@pytest.fixture
def race_dir(tmp_path: Path) -> Path:
    make_repo(tmp_path / "repo")
    subprocess.run([*GIT, "-C", str(tmp_path / "repo"), "branch", "-q", "other"], check=True)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "session.jsonl").write_text('{"kind": "text", "text": "hi"}\n')
    (tmp_path / "briefs").mkdir()
    (tmp_path / "briefs" / "task.md").write_text("Make the tests pass.\n")
    return tmp_path


def test_full_race_file_builds_the_whole_spec(race_dir: Path):
    (race_dir / "race.toml").write_text(FULL)
    spec = load_race(race_dir / "race.toml")
    assert spec == RaceSpec(
        repository=(race_dir / "repo").resolve(),
        name="fix-parser",
        base="main",
        mode="race",
        select="best",
        concurrency=3,
        run_id="run-1.a",
        cleanup_timeout=12.5,
        budget=BudgetSpec(
            attempts=6, tokens=TokenLimits(100000, 50000, 2000, 20000), cost_usd=2.0, candidate_timeout=900.0
        ),
        validate=ValidateSpec(command=("python", "-m", "pytest"), timeout=120.0, require_commits=False),
        score=ScoreSpec(command=("python", "score.py"), timeout=30.0),
        sandbox=SandboxSpec(
            provider="podman",
            image="python:3.11-slim",
            network="bridge",
            endpoint="unix:///run/podman.sock",
            memory="2g",
            cpus=1.5,
            pids=256,
        ),
        durability=DurabilitySpec(enabled=True, version="2", resume="retry-incomplete"),
        prices={"claude-sonnet/4.5": Price(input=3.0, cached=0.3, cache_write=3.75, output=15.0)},
        candidates=(
            CandidateSpec(
                key="claude-1",
                agent="command",
                command=("python", "agent.py", "--fast"),
                brief='Fix the parser.\n[[candidates]]\nkey = "not-a-candidate"\n',
                model="sonnet",
                env={"LEVEL": "3", "ODD NAME": "x"},
                timeout=300.0,
                max_turns=40,
                allowed_tools=("Read", "Edit"),
                args=("--verbose",),
            ),
            CandidateSpec(
                key="demo_2",
                agent="demo",
                brief="Make the tests pass.\n",
                script=(race_dir / "scripts" / "session.jsonl").resolve(),
                env={"MODE": "replay"},
            ),
        ),
        path=(race_dir / "race.toml").resolve(),
    )
    assert spec.repository.is_absolute() and spec.candidates[1].script.is_absolute()


def test_minimal_race_file_takes_the_defaults(tmp_path: Path, repo: Path):
    (tmp_path / "race.toml").write_text(
        f'[race]\nrepository = "{repo}"\n\n[[candidates]]\nkey = "a"\nagent = "command"\n'
        'command = ["true"]\nbrief = "go"\n'
    )
    spec = load_race(str(tmp_path / "race.toml"))
    assert (spec.name, spec.base, spec.mode, spec.select, spec.concurrency) == (
        "race",
        "HEAD",
        "race",
        "first",
        None,
    )
    assert spec.budget == BudgetSpec() and spec.validate == ValidateSpec() and spec.score is None
    assert spec.sandbox == SandboxSpec() and spec.durability == DurabilitySpec() and not spec.prices
    assert spec.cleanup_timeout == 30.0 and spec.path == (tmp_path / "race.toml").resolve()


def test_budget_tokens_may_be_a_table_of_its_own(tmp_path: Path, repo: Path):
    (tmp_path / "race.toml").write_text(
        f'[race]\nrepository = "{repo}"\n[budget]\nattempts = 1\n[budget.tokens]\noutput = 0\n'
        '[[candidates]]\nkey = "a"\nagent = "command"\ncommand = ["true"]\nbrief = "go"\n'
    )
    assert load_race(tmp_path / "race.toml").budget == BudgetSpec(attempts=1, tokens=TokenLimits(output=0))


def test_unreachable_timeout_is_read_checked_and_written_back(tmp_path: Path, repo: Path):
    body = '[[candidates]]\nkey = "a"\nagent = "codex"\nbrief = "go"\n'
    (tmp_path / "race.toml").write_text(
        f'[race]\nrepository = "{repo}"\n[budget]\nunreachable_timeout = 30\n' + body
    )
    spec = load_race(tmp_path / "race.toml")
    assert spec.budget == BudgetSpec(unreachable_timeout=30.0)
    (tmp_path / "copy.toml").write_text(dump_race(spec))
    assert load_race(tmp_path / "copy.toml").budget.unreachable_timeout == 30.0
    assert BudgetSpec().unreachable_timeout == 120.0  # about two minutes unless the file says
    (tmp_path / "bad.toml").write_text(
        f'[race]\nrepository = "{repo}"\n[budget]\nunreachable_timeout = 0\n' + body
    )
    with pytest.raises(
        RaceFileError, match=r"bad.toml:4: budget.unreachable_timeout: must be greater than 0"
    ):
        load_race(tmp_path / "bad.toml")


def test_dump_race_round_trips_the_full_file(race_dir: Path):
    (race_dir / "race.toml").write_text(FULL)
    spec = load_race(race_dir / "race.toml")
    text = dump_race(spec)
    assert 'repository = "repo"' in text and 'script = "scripts/session.jsonl"' in text
    (race_dir / "copy.toml").write_text(text)
    assert load_race(race_dir / "copy.toml") == dataclasses.replace(
        spec, path=(race_dir / "copy.toml").resolve()
    )


@pytest.mark.parametrize(
    "brief",
    [
        'quotes " and """ and \'\'\' inside',
        'ends with a quote"',
        'ends with two quotes""',
        "back\\slash at the end\\",
        "\nstarts with a newline\r\nand has CRLF and a tab\t",
        "unicode: café ✓ \u0007 bell",
        '[[candidates]]\nkey = "evil"\n[race]\n',
    ],
)
def test_dump_race_round_trips_awkward_text(tmp_path: Path, repo: Path, brief: str):
    spec = RaceSpec(
        repository=repo,
        candidates=(
            CandidateSpec(
                key="k",
                agent="command",
                command=("sh", "-c", 'echo "$X" \\ ok'),
                brief=brief,
                env={"A B": 'va"l', "X": "\n"},
            ),
        ),
        prices={'we"ird model': Price(output=1.0), "zero": Price()},
        budget=BudgetSpec(tokens=TokenLimits(cached=0)),
    )
    target = tmp_path / "sub" / "race.toml"
    target.parent.mkdir()
    target.write_text(dump_race(spec, relative_to=target.parent))
    assert str(repo) in target.read_text()  # outside the file's directory: written absolute
    assert load_race(target) == dataclasses.replace(spec, path=target.resolve())


def test_race_brief_goes_to_every_candidate_without_its_own(tmp_path: Path, repo: Path):
    (tmp_path / "briefs").mkdir()
    (tmp_path / "briefs" / "task.md").write_text("The shared task.\n")
    (tmp_path / "race.toml").write_text(
        f'[race]\nrepository = "{repo}"\nbrief_file = "briefs/task.md"\n'
        + CAND.replace('key = "a"', 'key = "own"').replace('brief = "go"', 'brief = "my own task"')
        + CAND_B
        + CAND_B.replace('key = "b"', 'key = "c"')
    )
    spec = load_race(tmp_path / "race.toml")
    assert spec.brief == "The shared task.\n"
    assert [(c.key, c.brief) for c in spec.candidates] == [
        ("own", "my own task"),
        ("b", "The shared task.\n"),
        ("c", "The shared task.\n"),
    ]


def test_fallback_with_concurrency_one_is_fine(tmp_path: Path, repo: Path):
    (tmp_path / "race.toml").write_text(race_text(str(repo), 'mode = "fallback"\nconcurrency = 1\n'))
    spec = load_race(tmp_path / "race.toml")
    assert (spec.mode, spec.concurrency, spec.effective_concurrency) == ("fallback", 1, 1)


def test_dump_race_writes_the_shared_brief_once(tmp_path: Path, repo: Path):
    shared = "Fix add().\nRun the tests.\n"
    spec = RaceSpec(
        repository=repo,
        brief=shared,
        candidates=(
            CandidateSpec(key="a", agent="command", command=("true",), brief=shared),
            CandidateSpec(key="b", agent="command", command=("true",), brief="something else"),
            CandidateSpec(key="c", agent="command", command=("true",), brief=shared),
        ),
    )
    text = dump_race(spec, relative_to=tmp_path)
    assert text.count("Fix add()") == 1 and text.count("something else") == 1
    (tmp_path / "race.toml").write_text(text)
    assert load_race(tmp_path / "race.toml") == dataclasses.replace(
        spec, path=(tmp_path / "race.toml").resolve()
    )


def test_dump_race_leaves_out_python_only_checks(tmp_path: Path, repo: Path):
    spec = RaceSpec(
        repository=repo,
        validate=ValidateSpec(command=("true",), check=lambda ctx: True),
        candidates=(CandidateSpec(key="k", agent="command", command=("true",), brief="b"),),
    )
    (tmp_path / "race.toml").write_text(dump_race(spec))
    assert load_race(tmp_path / "race.toml").validate == ValidateSpec(command=("true",))


def test_dump_race_refuses_what_toml_cannot_say(repo: Path):
    spec = RaceSpec(
        repository=repo,
        validate=ValidateSpec(timeout=None),
        candidates=(CandidateSpec(key="k", agent="command", command=("true",), brief="b"),),
    )
    with pytest.raises(ValueError, match=r"validate\.timeout"):
        dump_race(spec)


def test_agent_kinds_registered_later_are_accepted(tmp_path: Path, repo: Path, monkeypatch):
    (tmp_path / "race.toml").write_text(
        f'[race]\nrepository = "{repo}"\n[[candidates]]\nkey = "a"\nagent = "replay"\nbrief = "go"\n'
    )
    with pytest.raises(RaceFileError, match="replay"):
        load_race(tmp_path / "race.toml")

    class Replay(CommandAgent):
        kind = "replay"

        def launch(self, candidate, brief, context):
            return agents.Launch(argv=("replay-transcript",), stdin=brief.encode())

    monkeypatch.setitem(agents._ADAPTERS, "replay", Replay)
    assert load_race(tmp_path / "race.toml").candidates[0].agent == "replay"


def test_error_text_is_one_line_and_omits_unknown_parts():
    assert str(RaceFileError("r.toml", 3, "race.mode", "bad\nvalue")) == "r.toml:3: race.mode: bad value"
    assert str(RaceFileError("r.toml", None, "candidates", "none")) == "r.toml: candidates: none"
    assert str(RaceFileError("r.toml", None, None, "no such file")) == "r.toml: no such file"
    error = RaceFileError("r.toml", 7, "budget.tokens.output", "must be 0 or more")
    assert (error.path, error.line, error.key, error.message) == (
        "r.toml",
        7,
        "budget.tokens.output",
        "must be 0 or more",
    )


# --- errors: each case marks the line it expects with `# <-` ---------------------------------------

RACE = '[race]\nrepository = "{repo}"\n'
CAND = '[[candidates]]\nkey = "a"\nagent = "command"\ncommand = ["python", "agent.py"]\nbrief = "go"\n'
CAND_B = '[[candidates]]\nkey = "b"\nagent = "command"\ncommand = ["true"]\n'

ERRORS = {
    # unknown keys, with suggestions
    "unknown race key": (
        RACE + "concurency = 2  # <-\n" + CAND,
        "race.concurency",
        "unknown key 'concurency' (did you mean 'concurrency'?)",
    ),
    "unknown table": (
        '[sandbx]  # <-\nprovider = "local"\n' + RACE + CAND,
        "sandbx",
        "did you mean 'sandbox'?",
    ),
    "cleanup_timeout at top": (
        "cleanup_timeout = 3  # <-\n" + RACE + CAND,
        "cleanup_timeout",
        "it belongs in [race]",
    ),
    "unknown candidate key": (
        RACE + CAND + 'modle = "x"  # <-\n',
        "candidates[0].modle",
        "did you mean 'model'?",
    ),
    "unknown token kind": (
        RACE + "[budget]\ntokens = { input = 1, total = 5 }  # <-\n" + CAND,
        "budget.tokens.total",
        "unknown key 'total'",
    ),
    "unknown price key": (
        RACE + "[prices.m]\ninput = 1\ntotal = 2  # <-\n" + CAND,
        "prices.m.total",
        "unknown key",
    ),
    # [race]
    "missing race": (CAND, "race", "missing [race]"),
    "missing repository": ('[race]  # <-\nname = "x"\n' + CAND, "race", "missing key 'repository'"),
    "concurrency as string": (
        RACE + 'concurrency = "3"  # <-\n' + CAND,
        "race.concurrency",
        'expected an integer, found a string ("3")',
    ),
    "concurrency as bool": (
        RACE + "concurrency = true  # <-\n" + CAND,
        "race.concurrency",
        "expected an integer, found a boolean (true)",
    ),
    "concurrency as float": (
        RACE + "concurrency = 2.0  # <-\n" + CAND,
        "race.concurrency",
        "expected an integer, found a number",
    ),
    "concurrency zero": (RACE + "concurrency = 0  # <-\n" + CAND, "race.concurrency", "between 1 and 64"),
    "concurrency too high": (
        RACE + "concurrency = 65  # <-\n" + CAND,
        "race.concurrency",
        "between 1 and 64",
    ),
    "bad mode": (RACE + 'mode = "fallbak"  # <-\n' + CAND, "race.mode", 'did you mean "fallback"?'),
    "bad select": (RACE + 'select = "fastest"  # <-\n' + CAND, "race.select", "not one of: first, best"),
    "best without score": (RACE + 'select = "best"  # <-\n' + CAND, "race.select", "needs a [score]"),
    "score without best": (
        RACE + CAND + '[score]  # <-\ncommand = ["true"]\n',
        "score",
        'only used with select = "best"',
    ),
    "score without command": (
        RACE + 'select = "best"\n[score]  # <-\ntimeout = 3\n' + CAND,
        "score",
        "missing key 'command'",
    ),
    "fallback with best": (
        RACE + 'mode = "fallback"\nselect = "best"  # <-\n[score]\ncommand = ["true"]\n' + CAND,
        "race.select",
        'cannot be used with mode = "fallback"',
    ),
    "fallback with concurrency": (
        RACE + 'mode = "fallback"\nconcurrency = 2  # <-\n' + CAND,
        "race.concurrency",
        'concurrency = 2 cannot be used with mode = "fallback"',
    ),
    "race brief and brief_file": (
        RACE + 'brief = "go"\nbrief_file = "brief.md"  # <-\n' + CAND,
        "race.brief_file",
        "either brief or brief_file, not both",
    ),
    "blank race brief": (RACE + 'brief = "  "  # <-\n' + CAND, "race.brief", "must not be empty"),
    "race brief_file missing": (
        RACE + 'brief_file = "nope.md"  # <-\n' + CAND,
        "race.brief_file",
        "no such file",
    ),
    "race brief_file empty": (
        RACE + 'brief_file = "empty.md"  # <-\n' + CAND,
        "race.brief_file",
        "the brief file is empty",
    ),
    "run id with slash": (RACE + 'run_id = "../x"  # <-\n' + CAND, "race.run_id", "invalid run id"),
    "blank run id": (RACE + 'run_id = "  "  # <-\n' + CAND, "race.run_id", "must not be empty"),
    "blank name": (RACE + 'name = ""  # <-\n' + CAND, "race.name", "must not be empty"),
    "cleanup timeout zero": (
        RACE + "cleanup_timeout = 0  # <-\n" + CAND,
        "race.cleanup_timeout",
        "greater than 0",
    ),
    "base not a commit": (
        RACE + 'base = "no-such-branch"  # <-\n' + CAND,
        "race.base",
        '"no-such-branch" is not a commit',
    ),
    "base like an option": (
        RACE + 'base = "--output=/tmp/x"  # <-\n' + CAND,
        "race.base",
        "must not start with '-'",
    ),
    "race not a table": ('race = "fast"  # <-\n' + CAND, "race", "expected a table, found a string"),
    # [budget]
    "negative attempts": (
        RACE + "[budget]\nattempts = -1  # <-\n" + CAND,
        "budget.attempts",
        "must be at least 1, found -1",
    ),
    "attempts as bool": (
        RACE + "[budget]\nattempts = false  # <-\n" + CAND,
        "budget.attempts",
        "expected an integer, found a boolean",
    ),
    "negative output tokens": (
        RACE + "[budget.tokens]\noutput = -5  # <-\n" + CAND,
        "budget.tokens.output",
        "must be 0 or more",
    ),
    "tokens not a table": (
        RACE + "[budget]\ntokens = 5  # <-\n" + CAND,
        "budget.tokens",
        "expected a table like { input = 100000",
    ),
    "negative cost": (RACE + "[budget]\ncost_usd = -0.5  # <-\n" + CAND, "budget.cost_usd", "0 or more"),
    "cost is infinite": (RACE + "[budget]\ncost_usd = inf  # <-\n" + CAND, "budget.cost_usd", "finite"),
    "zero candidate timeout": (
        RACE + "[budget]\ncandidate_timeout = 0  # <-\n" + CAND,
        "budget.candidate_timeout",
        "greater than 0",
    ),
    # [validate]
    "validate command as string": (
        RACE + '[validate]\ncommand = "pytest -q"  # <-\n' + CAND,
        "validate.command",
        'expected a list of strings (argv), e.g. ["pytest", "-q"], found a string',
    ),
    "validate command empty": (
        RACE + "[validate]\ncommand = []  # <-\n" + CAND,
        "validate.command",
        "must not be empty",
    ),
    "validate command with a number": (
        RACE + '[validate]\ncommand = ["sleep", 3]  # <-\n' + CAND,
        "validate.command[1]",
        "expected a string, found an integer (3)",
    ),
    "validate timeout negative": (
        RACE + "[validate]\ntimeout = -1  # <-\n" + CAND,
        "validate.timeout",
        "greater than 0",
    ),
    "require_commits as string": (
        RACE + '[validate]\nrequire_commits = "yes"  # <-\n' + CAND,
        "validate.require_commits",
        "expected a boolean",
    ),
    # [sandbox], [durability], [prices]
    "bad provider": (
        RACE + '[sandbox]\nprovider = "dokcer"  # <-\n' + CAND,
        "sandbox.provider",
        'did you mean "docker"?',
    ),
    "docker without image": (
        RACE + '[sandbox]  # <-\nprovider = "docker"\n' + CAND,
        "sandbox",
        "missing key 'image'",
    ),
    "bad memory": (
        RACE + '[sandbox]\nmemory = "lots"  # <-\n' + CAND,
        "sandbox.memory",
        "invalid memory size",
    ),
    "zero cpus": (RACE + "[sandbox]\ncpus = 0  # <-\n" + CAND, "sandbox.cpus", "greater than 0"),
    "zero pids": (RACE + "[sandbox]\npids = 0  # <-\n" + CAND, "sandbox.pids", "1 or more"),
    "blank network": (
        RACE + '[sandbox]\nnetwork = ""  # <-\n' + CAND,
        "sandbox.network",
        "must not be empty",
    ),
    "durability enabled as string": (
        RACE + '[durability]\nenabled = "yes"  # <-\n' + CAND,
        "durability.enabled",
        "expected a boolean",
    ),
    "bad resume": (
        RACE + '[durability]\nresume = "always"  # <-\n' + CAND,
        "durability.resume",
        "not one of: retry-incomplete",
    ),
    "negative price": (
        RACE + '[prices."gpt-x"]\noutput = -1  # <-\n' + CAND,
        "prices.gpt-x.output",
        "0 or more",
    ),
    "price as string": (
        RACE + '[prices.m]\ninput = "3 USD"  # <-\n' + CAND,
        "prices.m.input",
        "expected a number, found a string",
    ),
    # [[candidates]]
    "no candidates": (RACE, "candidates", "no candidates"),
    "empty candidates": ("candidates = []  # <-\n" + RACE, "candidates", "no candidates"),
    "candidates inside race": (RACE + "candidates = []  # <-\n", "race.candidates", "unknown key"),
    "candidates not tables": ('candidates = "a"  # <-\n' + RACE, "candidates", "expected an array of tables"),
    "key with dot-dot": (
        RACE + CAND.replace('key = "a"', 'key = "../x"  # <-'),
        "candidates[0].key",
        'invalid key "../x"',
    ),
    "key too long": (
        RACE + CAND.replace('key = "a"', f'key = "{"k" * 65}"  # <-'),
        "candidates[0].key",
        "invalid key",
    ),
    "key as integer": (
        RACE + CAND.replace('key = "a"', "key = 7  # <-"),
        "candidates[0].key",
        "expected a string, found an integer",
    ),
    "missing key": (
        RACE + CAND + '[[candidates]]  # <-\nagent = "command"\n',
        "candidates[1]",
        "missing key 'key'",
    ),
    "duplicate key": (
        RACE + CAND + CAND.replace('key = "a"', 'key = "a"  # <-'),
        "candidates[1].key",
        'duplicate key "a" (already used by candidates[0])',
    ),
    "unknown agent": (
        RACE + CAND.replace('agent = "command"', 'agent = "gpt-wizard"  # <-'),
        "candidates[0].agent",
        '"gpt-wizard" is not one of',
    ),
    "missing agent": (
        RACE + '[[candidates]]  # <-\nkey = "a"\nbrief = "go"\n',
        "candidates[0]",
        "missing key 'agent'",
    ),
    "brief and brief_file": (
        RACE + CAND + 'brief_file = "brief.md"  # <-\n',
        "candidates[0].brief_file",
        "either brief or brief_file, not both",
    ),
    "missing brief": (
        RACE + CAND_B.replace("[[candidates]]", "[[candidates]]  # <-"),
        "candidates[0]",
        "missing key 'brief'",
    ),
    "blank brief": (
        RACE + CAND.replace('brief = "go"', 'brief = " \\n "  # <-'),
        "candidates[0].brief",
        "must not be empty",
    ),
    "brief_file missing": (
        RACE + CAND_B + 'brief_file = "nope.md"  # <-\n',
        "candidates[0].brief_file",
        "no such file",
    ),
    "brief_file empty": (
        RACE + CAND_B + 'brief_file = "empty.md"  # <-\n',
        "candidates[0].brief_file",
        "the brief file is empty",
    ),
    "brief_file is a directory": (
        RACE + CAND_B + 'brief_file = "."  # <-\n',
        "candidates[0].brief_file",
        "not a regular file",
    ),
    "command agent without command": (
        RACE + '[[candidates]]  # <-\nkey = "a"\nagent = "command"\nbrief = "b"\n',
        "candidates[0]",
        "missing key 'command'",
    ),
    "command for demo agent": (
        RACE + '[[candidates]]\nkey = "a"\nagent = "demo"\nscript = "s.jsonl"\n'
        'brief = "b"\ncommand = ["x"]  # <-\n',
        "candidates[0].command",
        'command is only for agent = "command"',
    ),
    "demo without script": (
        RACE + '[[candidates]]  # <-\nkey = "a"\nagent = "demo"\nbrief = "b"\n',
        "candidates[0]",
        "missing key 'script'",
    ),
    "demo script missing": (
        RACE + '[[candidates]]\nkey = "a"\nagent = "demo"\nbrief = "b"\nscript = "gone.jsonl"  # <-\n',
        "candidates[0].script",
        "no such file",
    ),
    "env value not a string": (
        RACE + CAND + "env = { LEVEL = 3 }  # <-\n",
        "candidates[0].env.LEVEL",
        "expected a string, found an integer",
    ),
    "env name with equals": (
        RACE + CAND + '[candidates.env]\n"A=B" = "x"  # <-\n',
        'candidates[0].env."A=B"',
        "not a valid environment variable name",
    ),
    "candidate timeout negative": (
        RACE + CAND + "timeout = -3  # <-\n",
        "candidates[0].timeout",
        "greater than 0",
    ),
    "max_turns zero": (RACE + CAND + "max_turns = 0  # <-\n", "candidates[0].max_turns", "1 or more"),
    "allowed_tools as string": (
        RACE + CAND + 'allowed_tools = "Read"  # <-\n',
        "candidates[0].allowed_tools",
        "expected a list of strings, found a string",
    ),
    "args with a bool": (
        RACE + CAND + 'args = ["-v", true]  # <-\n',
        "candidates[0].args[1]",
        "expected a string, found a boolean",
    ),
    "second candidate error": (
        RACE + CAND + CAND_B + 'brief = "x"\ntimeout = "soon"  # <-\n',
        "candidates[1].timeout",
        "expected a number",
    ),
    # where keys are written in other TOML forms
    "dotted keys at the top": (
        'race.repository = "{repo}"\nrace.concurency = 3  # <-\n' + CAND,
        "race.concurency",
        "did you mean 'concurrency'?",
    ),
    "inline candidates under race": (
        RACE + 'candidates = [{ key = "ok" }, { key = "../x" }]  # <-\n',
        "race.candidates",
        "unknown key",
    ),
    "inline candidates at the top": (
        'candidates = [{ key = "ok" }, { key = "../x" }]  # <-\n' + RACE,
        "candidates[1].key",
        'invalid key "../x"',
    ),
    "quoted keys": (
        RACE + CAND + '[candidates.env]\n\'LEVEL\' = "1"\n"ex\\u0074ra" = 2  # <-\n',
        "candidates[0].env.extra",
        "expected a string, found an integer (2)",
    ),
    # [setup]
    "setup command as string": (
        RACE + '[setup]\ncommand = "make deps"  # <-\n' + CAND,
        "setup.command",
        "expected a list of strings (argv)",
    ),
    "setup unknown key": (
        RACE + '[setup]\ncopy_files = [".env"]  # <-\n' + CAND,
        "setup.copy_files",
        "unknown key",
    ),
    "setup copy leaves the repo": (
        RACE + '[setup]\ncopy = [".env", "../secrets"]  # <-\n' + CAND,
        "setup.copy[1]",
        "must not leave the repository",
    ),
    "setup copy absolute": (
        RACE + '[setup]\ncopy = ["/etc/passwd"]  # <-\n' + CAND,
        "setup.copy[0]",
        "must be relative to the repository root",
    ),
    "setup cache a glob": (
        RACE + '[setup]\ncommand = ["x"]\ncache_key = ["a"]\ncache = ["*.venv"]  # <-\n' + CAND,
        "setup.cache[0]",
        "must be a path, not a glob",
    ),
    "setup cache into git": (
        RACE + '[setup]\ncommand = ["x"]\ncache_key = ["a"]\ncache = [".git/hooks"]  # <-\n' + CAND,
        "setup.cache[0]",
        "names git's or outpost-tui's own files",
    ),
    "setup cache without key": (
        RACE + '[setup]\ncommand = ["x"]\ncache = [".venv"]  # <-\n' + CAND,
        "setup.cache",
        "cache needs cache_key",
    ),
    "setup key without cache": (
        RACE + '[setup]\ncache_key = ["package-lock.json"]  # <-\n' + CAND,
        "setup.cache_key",
        "only used with cache",
    ),
    "setup cache without command": (
        RACE + '[setup]\ncache_key = ["a"]\ncache = ["b"]  # <-\n' + CAND,
        "setup.cache",
        "cache needs a command",
    ),
    "setup too many ports": (
        RACE + "[setup]\nports = 99  # <-\n" + CAND,
        "setup.ports",
        "must be between 0 and 16, found 99",
    ),
    "setup timeout zero": (
        RACE + '[setup]\ncommand = ["x"]\ntimeout = 0  # <-\n' + CAND,
        "setup.timeout",
        "must be greater than 0",
    ),
    # TOML syntax
    "toml syntax error": (RACE + "concurrency = = 2  # <-\n" + CAND, "race.concurrency", "invalid TOML"),
    "toml duplicate key": (RACE + CAND + 'key = "b"  # <-\n', "candidates[0].key", "already defined"),
    "toml unterminated string": (
        RACE + CAND + 'model = "sonnet  # <-\n',
        "candidates[0].model",
        "invalid TOML",
    ),
}


def marked_line(text: str) -> int | None:
    for number, line in enumerate(text.splitlines(), 1):
        if line.endswith("# <-"):
            return number
    return None


@pytest.mark.parametrize("text, key, message", ERRORS.values(), ids=ERRORS.keys())
def test_each_rule_names_file_line_and_key(tmp_path: Path, repo: Path, text: str, key: str, message: str):
    (tmp_path / "empty.md").write_text("\n")
    (tmp_path / "s.jsonl").write_text("{}\n")
    text = text.replace("{repo}", str(repo))
    race_file = tmp_path / "race.toml"
    race_file.write_text(text)
    with pytest.raises(RaceFileError) as caught:
        load_race(race_file)
    error = caught.value
    assert error.key == key
    assert message in error.message
    assert error.line == marked_line(text)
    assert error.path == str(race_file)
    assert str(error).startswith(
        f"{race_file}:{error.line}: {key}: " if error.line else f"{race_file}: {key}: "
    )
    assert "\n" not in str(error)


def race_text(repository: str, *extra: str) -> str:
    return f'[race]\nrepository = "{repository}"\n' + "".join(extra) + CAND


def test_repository_is_relative_to_the_race_file(tmp_path: Path):
    make_repo(tmp_path / "work" / "repo")
    (tmp_path / "work" / "race.toml").write_text(race_text("repo"))
    assert load_race(tmp_path / "work" / "race.toml").repository == (tmp_path / "work" / "repo").resolve()
    (tmp_path / "elsewhere.toml").write_text(race_text("repo"))
    with pytest.raises(RaceFileError, match="no such directory") as caught:
        load_race(tmp_path / "elsewhere.toml")
    assert (caught.value.key, caught.value.line) == ("race.repository", 2)


def test_text_is_read_as_the_file_it_would_be(tmp_path: Path):
    """The configure screen checks a would-be file's text before writing it: same rules, same
    words, paths relative to where the file would be, and nothing read from or written to disk."""
    make_repo(tmp_path / "work" / "repo")
    unsaved = tmp_path / "work" / "new-race.toml"
    spec_ = load_race_text(race_text("repo"), unsaved)
    assert spec_.repository == (tmp_path / "work" / "repo").resolve()
    assert spec_.path == unsaved.resolve() and not unsaved.exists()
    with pytest.raises(RaceFileError) as caught:
        load_race_text(race_text("repo", "concurrency = 0\n"), unsaved, shown="the form")
    assert str(caught.value) == "the form:3: race.concurrency: must be between 1 and 64, found 0"
    (tmp_path / "work" / "saved.toml").write_text(race_text("repo", "concurrency = 0\n"))
    with pytest.raises(RaceFileError) as from_file:
        load_race(tmp_path / "work" / "saved.toml")
    assert (from_file.value.line, from_file.value.key, from_file.value.message) == (
        caught.value.line,
        caught.value.key,
        caught.value.message,
    )


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda root: (root / "plain").mkdir(), "not a git repository"),
        (lambda root: (root / "plain").write_text("x"), "not a directory"),
        (lambda root: make_repo(root / "plain", commit=False), "has no commits yet"),
    ],
)
def test_repository_must_be_a_git_repository_with_a_commit(tmp_path: Path, setup, message: str):
    root = tmp_path / "not-a-git-area"
    root.mkdir()
    setup(root)
    (root / "race.toml").write_text(race_text("plain"))
    with pytest.raises(RaceFileError, match=message) as caught:
        load_race(root / "race.toml")
    assert (caught.value.key, caught.value.line) == ("race.repository", 2)


def test_keys_are_checked_before_the_repository_is_touched(tmp_path: Path):
    (tmp_path / "race.toml").write_text(race_text("missing-repo").replace('key = "a"', 'key = "../../etc"'))
    with pytest.raises(RaceFileError) as caught:
        load_race(tmp_path / "race.toml")
    assert caught.value.key == "candidates[0].key" and "invalid key" in caught.value.message


def test_too_many_candidates(tmp_path: Path, repo: Path):
    many = "".join(CAND.replace('key = "a"', f'key = "c{index}"') for index in range(MAX_CANDIDATES + 1))
    (tmp_path / "race.toml").write_text(race_text(str(repo)).replace(CAND, many))
    with pytest.raises(RaceFileError, match=f"at most {MAX_CANDIDATES}") as caught:
        load_race(tmp_path / "race.toml")
    assert caught.value.key == f"candidates[{MAX_CANDIDATES}]"
    assert caught.value.line == 3 + 5 * MAX_CANDIDATES


def test_exactly_max_candidates_is_fine(tmp_path: Path, repo: Path):
    many = "".join(CAND.replace('key = "a"', f'key = "c{index}"') for index in range(MAX_CANDIDATES))
    (tmp_path / "race.toml").write_text(race_text(str(repo)).replace(CAND, many))
    assert len(load_race(tmp_path / "race.toml").candidates) == MAX_CANDIDATES


def test_unreadable_files_are_one_line_errors(tmp_path: Path):
    with pytest.raises(RaceFileError, match="no such file") as caught:
        load_race(tmp_path / "missing.toml")
    assert caught.value.line is None and caught.value.key is None
    with pytest.raises(RaceFileError, match="is a directory"):
        load_race(tmp_path)
    (tmp_path / "latin1.toml").write_bytes(b'[race]\nname = "caf\xe9"\n')
    with pytest.raises(RaceFileError, match="not UTF-8") as caught:
        load_race(tmp_path / "latin1.toml")
    assert caught.value.line == 2


def test_a_symlink_loop_is_a_one_line_error(tmp_path: Path, repo: Path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "race.toml").write_text(
        f'[race]\nrepository = "{repo}"\n[[candidates]]\nkey = "a"\nagent = "demo"\nbrief = "b"\n'
        'script = "loop"\n'
    )
    with pytest.raises(RaceFileError) as caught:
        load_race(tmp_path / "race.toml")
    assert (caught.value.key, caught.value.line) == ("candidates[0].script", 7)
    assert "loop" in caught.value.message and "\n" not in str(caught.value)


def test_syntax_error_at_the_end_of_the_file(tmp_path: Path):
    (tmp_path / "race.toml").write_text('[race]\nrepository = "r"\ncommand = [\n  "a",\n')
    with pytest.raises(RaceFileError, match="invalid TOML") as caught:
        load_race(tmp_path / "race.toml")
    assert caught.value.line == 4


def test_line_scanner_agrees_with_tomllib_on_generated_files():
    """Keys written by tomli_w with awkward strings (quotes, brackets, #, newlines) are found on the
    line that names them."""
    import random
    import tomllib

    import tomli_w

    from outpost_tui.engine.racefile.locate import Locator as _Locator

    rnd = random.Random(7)
    alphabet = ["a", '"', "'", "\\", "\n", "[", "]", "#", "=", "{", "}", " ", "é", "\t", '"""', "'''", "."]

    def text() -> str:
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 8)))

    def value(depth: int):
        roll = rnd.random()
        if depth < 2 and roll < 0.25:
            return {
                rnd.choice(["k", "x-y", text() or "z"]): value(depth + 1) for _ in range(rnd.randint(1, 3))
            }
        if depth < 2 and roll < 0.35:
            return [{"k": value(depth + 1)} for _ in range(rnd.randint(1, 3))]
        return [text()] if roll < 0.5 else text() if roll < 0.8 else rnd.randint(-5, 5)

    def leaves(table: dict, path=()):
        for key, item in table.items():
            if isinstance(item, dict):
                yield from leaves(item, path + (key,))
            elif isinstance(item, list) and item and isinstance(item[0], dict):
                for index, element in enumerate(item):
                    yield from leaves(element, path + (key, index))
            else:
                yield path + (key,)

    for _ in range(400):
        document = {rnd.choice(["k", "x-y", text() or "z"]): value(0) for _ in range(rnd.randint(1, 4))}
        for multiline in (False, True):
            source = tomli_w.dumps(document, multiline_strings=multiline)
            if tomllib.loads(source) != document:
                continue  # tomli_w normalised a line ending: not the scanner's concern
            locator, lines = _Locator(source), source.split("\n")
            for path in leaves(document):
                line = locator.line(path)
                assert line is not None, (path, source)
                if path in locator.lines:  # written on a line of its own, not inside an inline table
                    written = tomli_w.dumps({path[-1]: 0}).split(" = ")[0]
                    assert written in lines[line - 1], (path, line, source)


def test_setup_table_builds_the_spec_and_round_trips(tmp_path: Path, repo: Path):
    race_file = tmp_path / "race.toml"
    race_file.write_text(
        race_text(
            str(repo),
            '[setup]\ncommand = ["sh", "-c", "npm ci"]\ntimeout = 300\n'
            'cache = ["node_modules"]\ncache_key = ["package-lock.json"]\n'
            'copy = [".env", "config/*.local.json"]\nports = 2\n',
        )
    )
    loaded = load_race(race_file)
    assert loaded.setup == spec.SetupSpec(
        command=("sh", "-c", "npm ci"),
        timeout=300.0,
        cache=("node_modules",),
        cache_key=("package-lock.json",),
        copy=(".env", "config/*.local.json"),
        ports=2,
    )
    again = tmp_path / "again.toml"
    again.write_text(dump_race(loaded))
    assert load_race(again).setup == loaded.setup
    # no [setup]: nothing written, nothing set up
    plain = tmp_path / "plain.toml"
    plain.write_text(race_text(str(repo)))
    assert load_race(plain).setup.enabled is False
    assert "[setup]" not in dump_race(load_race(plain))
