"""The configure screen edits a real race file in place: each kind of key is edited, saved and read
back; the user's comments and untouched lines stay; the previous file is kept; errors are the race
file reader's own words, beside the field they name; `outpost-tui check` passes on what is saved."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import DataTable, Input, Select, Static, TextArea

from outpost_tui.engine.racefile import load_race
from outpost_tui.samples import materialise
from outpost_tui.ui.race_document import backup_path
from outpost_tui.ui.screens.configure import ConfigureScreen
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.screens.settings_form import CandidateForm, SettingsForm
from tests.cli.support import run_cli
from tests.ui.support import until

COMMENTS = [
    "# Sample race: three scripted demo agents race to fix a bug in a small calculator.",
    "# Every candidate gets this brief (a candidate may give its own instead).",
]


class Host(App):
    def __init__(self, race_file: Path) -> None:
        super().__init__()
        self.race_file = race_file
        self.messages: list[object] = []
        self.results: list[object] = []

    def on_mount(self) -> None:
        self.push_screen(ConfigureScreen(load_race(self.race_file), self.race_file), self.results.append)

    def on_configure_screen_saved(self, message: ConfigureScreen.Saved) -> None:
        self.messages.append(message)


@pytest.fixture
def race_file(tmp_path) -> Path:
    return materialise("race", tmp_path / "sample")


def status(app: App) -> str:
    return str(app.screen.query_one("#configure-status", Static).render())


def saved(app: Host) -> list[ConfigureScreen.Saved]:
    return [message for message in app.messages if isinstance(message, ConfigureScreen.Saved)]


def put(form: SettingsForm, field: str, text: str) -> None:
    """Set a field as the user would leave it (long texts are set, not typed key by key)."""
    widget = form.query_one(f"#{field}")
    if isinstance(widget, TextArea):
        widget.text = text
    elif isinstance(widget, Select):
        widget.value = text if text else Select.NULL
    else:
        widget.value = text


def error(form: SettingsForm, field: str) -> str:
    return str(form.query_one(f"#{field}-error", Static).render())


async def open_section(pilot, name: str) -> SettingsForm:
    screen = pilot.app.screen
    sections = screen.query_one("#sections", DataTable)
    sections.focus()
    sections.move_cursor(row=sections.get_row_index(name))
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, SettingsForm), f"the {name} form")
    return pilot.app.screen


async def done(pilot, form: SettingsForm) -> None:
    await pilot.press("ctrl+s")
    await until(pilot, lambda: pilot.app.screen is not form, "the form to close")


async def checked(pilot, form: SettingsForm) -> None:
    """Wait for the check the last edit started (as-you-type checks run in a worker)."""
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def save(pilot, app: Host) -> None:
    count = len(saved(app))
    await pilot.press("ctrl+s")
    failed = lambda: app.screen.query_one("#configure-status").has_class("error")  # noqa: E731
    await until(pilot, lambda: len(saved(app)) > count or failed(), "the save")


SECTION_EDITS = {
    "race": {
        "name": "renamed race",
        "concurrency": "2",
        "cleanup_timeout": "12",
        "base": "HEAD~0",
        "select": "best",
        "score_command": "python3 -c 'print(1)'",
        "score_timeout": "40",
    },
    "validate": {
        "timeout": "90",
        "gate": "exit-code",
        "require_commits": "false",
        "repeat": "2",
        "allow_baseline_failures": "true",
        "junit": "reports/junit.xml",
        "protect": "tests/** 'my file.ini'",
        "protect_mode": "flag",
    },
    "budget": {
        "attempts": "4",
        "input": "1000",
        "cached": "2000",
        "cache_write": "300",
        "output": "",
        "cost_usd": "2.5",
        "candidate_timeout": "",
        "unreachable_timeout": "30",
    },
    "sandbox": {
        "isolation": "none",
        "writable": "/var/cache/ccache '/srv/shared cache'",
        "network": "bridge",
        "memory": "2g",
        "cpus": "1.5",
        "pids": "256",
        "endpoint": "unix:///nonexistent/engine.sock",
    },
    "setup": {"command": "sh -c 'touch ready'", "timeout": "30", "copy": ".env local/*.cfg", "ports": "2"},
    "durability": {"enabled": "true", "run_id": "calc-1", "version": "2"},
}


@pytest.mark.anyio
async def test_every_section_is_edited_saved_in_place_and_checks(race_file):
    before = race_file.read_text()
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for section, edits in SECTION_EDITS.items():
            form = await open_section(pilot, section)
            for field, text in edits.items():
                put(form, field, text)
            await done(pilot, form)
            assert isinstance(app.screen, ConfigureScreen), section
        assert app.screen.dirty and "unsaved" in status(app)
        summary = {
            str(app.screen.query_one("#sections", DataTable).get_row_at(row)[0]): str(
                app.screen.query_one("#sections", DataTable).get_row_at(row)[1]
            )
            for row in range(7)
        }
        assert summary["Durability"] == "on · run id calc-1 · version 2"
        assert summary["Sandbox"] == (
            "local processes · unisolated (as you) · writable /var/cache/ccache, /srv/shared cache"
        )
        assert summary["Setup"] == "sh -c 'touch ready' (timeout 30s); copy .env, local/*.cfg; 2 port(s) each"
        await save(pilot, app)
        assert saved(app), status(app)
        assert "race.toml.bak" in status(app)

    spec = load_race(race_file)
    assert (spec.name, spec.concurrency, spec.cleanup_timeout, spec.base, spec.select) == (
        "renamed race",
        2,
        12,
        "HEAD~0",
        "best",
    )
    assert spec.score.command == ("python3", "-c", "print(1)") and spec.score.timeout == 40
    validate = spec.validate
    assert (
        validate.timeout,
        validate.gate,
        validate.require_commits,
        validate.repeat,
        validate.allow_baseline_failures,
        validate.junit,
        validate.protect,
        validate.protect_mode,
    ) == (90, "exit-code", False, 2, True, "reports/junit.xml", ("tests/**", "my file.ini"), "flag")
    budget = spec.budget
    assert (
        budget.attempts,
        budget.tokens.input,
        budget.tokens.cached,
        budget.tokens.cache_write,
        budget.tokens.output,
        budget.cost_usd,
        budget.candidate_timeout,
        budget.unreachable_timeout,
    ) == (4, 1000, 2000, 300, None, 2.5, None, 30)
    sandbox = spec.sandbox
    assert (sandbox.network, sandbox.memory, sandbox.cpus, sandbox.pids, sandbox.endpoint) == (
        "bridge",
        "2g",
        1.5,
        256,
        "unix:///nonexistent/engine.sock",
    )
    assert (sandbox.isolation, sandbox.writable) == ("none", ("/var/cache/ccache", "/srv/shared cache"))
    assert spec.setup.command == ("sh", "-c", "touch ready") and spec.setup.copy == (".env", "local/*.cfg")
    assert (spec.setup.timeout, spec.setup.ports) == (30, 2)
    assert spec.durability.enabled and spec.run_id == "calc-1" and spec.durability.version == "2"
    assert [candidate.key for candidate in spec.candidates] == ["fixer", "breaker", "slow"]

    text = race_file.read_text()
    for comment in COMMENTS:
        assert comment in text
    # untouched lines stay as the user wrote them, in their order; new sections go before the candidates
    order = [
        'repository = "project"',
        "[budget]",
        "[validate]",
        "[score]",
        "[sandbox]",
        "[setup]",
        "[durability]",
        "[[candidates]]",
    ]
    assert [text.index(line) for line in order] == sorted(text.index(line) for line in order)
    assert 'brief = """\ncalc.add(2, 3) returns -1.' in text
    assert 'command = ["python3", "-B", "-m", "unittest", "-q"]' in text
    assert "cost_usd = 2.5" in text and "candidate_timeout" not in text
    assert text.rstrip().endswith(
        '[[candidates]]\nkey = "slow"\nagent = "demo"\nscript = "scripts/slow.toml"'
    )
    assert backup_path(race_file).read_text() == before
    check = run_cli("check", race_file)
    assert check.returncode == 0, check.stderr


@pytest.mark.anyio
async def test_zero_attempts_is_refused_in_checks_words_beside_the_field(race_file, tmp_path):
    # what `outpost-tui check` says of a file with attempts = 0
    bad = tmp_path / "sample" / "zero.toml"
    bad.write_text(race_file.read_text().replace("attempts = 3", "attempts = 0"))
    check = run_cli("check", bad)
    assert check.returncode == 2
    words = check.stderr.strip().split("budget.attempts: ", 1)[1]
    assert words == "must be at least 1, found 0: no candidate would ever start"

    before = race_file.read_bytes()
    app = Host(race_file)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("b")
        form = app.screen
        attempts = form.query_one("#attempts", Input)
        attempts.value = ""
        await pilot.press("0")  # typed: the error shows before any submit
        await checked(pilot, form)
        assert error(form, "attempts") == words
        await pilot.press("ctrl+s")
        await checked(pilot, form)
        assert app.screen is form and form.focused is attempts
        put(form, "attempts", "2")
        await checked(pilot, form)
        assert error(form, "attempts") == ""
        await done(pilot, form)
        assert app.screen.working.budget.attempts == 2
    assert race_file.read_bytes() == before  # not saved: still only an edit


@pytest.mark.anyio
async def test_every_wrong_field_shows_its_own_error_and_the_form_stays_open(race_file):
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("b")
        form = app.screen
        put(form, "attempts", "-1")
        put(form, "cost_usd", "lots")
        put(form, "candidate_timeout", "0")
        await pilot.press("ctrl+s")
        await checked(pilot, form)
        assert app.screen is form
        fields = ("attempts", "output", "cost_usd", "candidate_timeout")
        errors = {field: error(form, field) for field in fields}
        assert errors == {
            "attempts": "must be at least 1, found -1",
            "output": "",
            "cost_usd": 'expected a number, found a string ("lots")',
            "candidate_timeout": "must be greater than 0, found 0",
        }
        assert form.focused is form.query_one("#attempts", Input)
        await pilot.press("escape")
        assert isinstance(app.screen, ConfigureScreen) and not app.screen.dirty


@pytest.mark.anyio
async def test_a_candidate_form_offers_what_its_agent_supports(race_file):
    text = race_file.read_text()
    race_file.write_text(text + '\n[[candidates]]\nkey = "claude-1"\nagent = "claude"\nmax_turns = 3\n')
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")  # fixer: a demo agent plays a script
        form = app.screen
        assert isinstance(form, CandidateForm)
        shown = lambda: {field.id for field in form.visible_fields()}  # noqa: E731
        assert {"script"} <= shown() and not {"model", "max_turns", "command", "args"} & shown()
        form.query_one("#agent", Select).value = "claude"
        await pilot.pause()
        assert {"model", "max_turns", "allowed_tools", "args", "script"} <= shown()
        form.query_one("#agent", Select).value = "codex"
        await pilot.pause()
        assert {"model", "args"} <= shown() and not {"max_turns", "allowed_tools"} & shown()
        form.query_one("#agent", Select).value = "command"
        await pilot.pause()
        assert "command" in shown()
        await pilot.press("escape")

        table = app.screen.query_one("#candidates", DataTable)
        table.move_cursor(row=3)
        await pilot.press("e")  # claude-1 has max_turns: switching to codex keeps it in view
        form = app.screen
        form.query_one("#agent", Select).value = "codex"
        await checked(pilot, form)
        assert "max_turns" in shown()
        assert error(form, "max_turns") == "codex has no max-turns limit; remove max_turns"
        put(form, "max_turns", "")
        await checked(pilot, form)
        assert error(form, "max_turns") == ""
        await done(pilot, form)
        await save(pilot, app)
    spec = load_race(race_file)
    assert spec.candidate("claude-1").agent == "codex" and spec.candidate("claude-1").max_turns is None


@pytest.mark.anyio
async def test_a_new_candidate_uses_the_race_brief_unless_given_its_own(race_file):
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for key, brief in (("shared", ""), ("own", "Fix add().\nThen run the tests.\n")):
            await pilot.press("n")
            form = app.screen
            assert isinstance(form, CandidateForm) and form.title_text == "New candidate"
            put(form, "key", key)
            form.query_one("#agent", Select).value = "command"
            await pilot.pause()
            put(form, "command", "python3 agent.py --note 'two words'")
            put(form, "brief", brief)
            put(form, "env", "MODE=fast\nGREETING=hello world")
            put(form, "timeout", "45")
            await done(pilot, form)
        table = app.screen.query_one("#candidates", DataTable)
        assert [str(table.get_row_at(row)[3]) for row in (3, 4)] == ["(the race's brief)", "Fix add()."]
        await pilot.press("s")  # unsaved: saved, then started
        await until(pilot, lambda: app.results, "the start")

    spec = load_race(race_file)
    assert app.results == [spec]  # started: the screen's result is the spec to start
    assert spec.candidate("shared").brief == spec.brief
    assert spec.candidate("own").brief == "Fix add().\nThen run the tests.\n"
    for key in ("shared", "own"):
        candidate = spec.candidate(key)
        assert candidate.command == ("python3", "agent.py", "--note", "two words")
        assert dict(candidate.env) == {"MODE": "fast", "GREETING": "hello world"} and candidate.timeout == 45
    text = race_file.read_text()
    shared = text[text.index('key = "shared"') : text.index('key = "own"')]
    assert "brief" not in shared
    assert run_cli("check", race_file).returncode == 0


@pytest.mark.anyio
async def test_bad_keys_and_env_get_the_readers_words(race_file):
    before = race_file.read_bytes()
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("down", "e")  # breaker
        form = app.screen
        put(form, "key", "bad key!")
        await pilot.press("ctrl+s")
        await checked(pilot, form)
        assert app.screen is form
        assert error(form, "key").startswith('invalid key "bad key!": use letters, digits')
        put(form, "key", "fixer")
        await checked(pilot, form)
        assert error(form, "key") == 'duplicate key "fixer" (already used by candidates[0])'
        # the reader names the later of the two: slow's key, shown as the file's error, not this field's
        put(form, "key", "slow")
        await checked(pilot, form)
        assert error(form, "key") == ""
        duplicate = 'candidates[2].key: duplicate key "slow" (already used by candidates[1])'
        assert duplicate in error(form, "form")
        put(form, "key", "breaker")
        put(form, "env", "GIT_DIR=/elsewhere")
        await checked(pilot, form)
        assert error(form, "key") == ""
        assert error(form, "env").startswith("git's own variables are not passed to candidates")
        put(form, "env", "no equals sign")
        await checked(pilot, form)
        assert error(form, "env") == "line 1: expected NAME=value, found 'no equals sign'"
        await pilot.press("escape")
        assert isinstance(app.screen, ConfigureScreen)
        await pilot.press("ctrl+s")
        assert status(app) == "no changes to save"
    assert saved(app) == [] and race_file.read_bytes() == before
    assert not backup_path(race_file).exists()


@pytest.mark.anyio
async def test_a_save_that_would_not_read_is_refused_and_the_file_untouched(race_file):
    before = race_file.read_bytes()
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("b")
        form = app.screen
        put(form, "attempts", "9")
        await done(pilot, form)
        # The repository goes away after the race was opened: the saved file would not load.
        shutil.rmtree(race_file.parent / "project" / ".git")
        await save(pilot, app)
        text = status(app)
        assert text.startswith("not saved (the file is unchanged): ")
        assert "race.repository" in text and "not a git repository" in text
        assert saved(app) == [] and app.screen.dirty
    assert race_file.read_bytes() == before
    assert sorted(path.name for path in race_file.parent.iterdir()) == ["project", "race.toml", "scripts"]


@pytest.mark.anyio
async def test_a_file_changed_on_disk_is_only_overwritten_when_the_user_says_so(race_file):
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("b")
        put(app.screen, "attempts", "6")
        await done(pilot, app.screen)
        elsewhere = race_file.read_text().replace('name = "calc-race"', 'name = "edited elsewhere"')
        race_file.write_text(elsewhere)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        assert "race.toml changed on disk since it was opened" in app.screen.question
        await pilot.press("n")
        assert race_file.read_text() == elsewhere
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the question")
        await pilot.press("y")
        await until(pilot, lambda: saved(app), "the save")
    assert backup_path(race_file).read_text() == elsewhere  # what was on disk is kept
    spec = load_race(race_file)
    assert spec.budget.attempts == 6 and spec.name == "calc-race"


@pytest.mark.anyio
async def test_candidates_are_removed_and_reordered_the_last_one_stays(race_file):
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#candidates", DataTable)
        keys = lambda: [str(table.get_row_at(row)[0]) for row in range(table.row_count)]  # noqa: E731
        await pilot.press("ctrl+down")  # fixer after breaker
        await until(pilot, lambda: keys() == ["breaker", "fixer", "slow"], "the move")
        await pilot.press("delete")
        assert app.screen.question == "Remove candidate fixer from the race?"
        await pilot.press("y")
        await until(pilot, lambda: keys() == ["breaker", "slow"], "the removal")
        await pilot.press("delete", "y")
        await until(pilot, lambda: keys() == ["breaker"], "the removal")
        await pilot.press("delete")
        assert isinstance(app.screen, ConfigureScreen)
        assert "a race needs at least one candidate" in status(app)
        await pilot.press("escape")  # unsaved: asks first
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await save(pilot, app)
    assert [candidate.key for candidate in load_race(race_file).candidates] == ["breaker"]
    assert all(comment in race_file.read_text() for comment in COMMENTS)


@pytest.mark.anyio
async def test_start_without_changes_sends_the_spec_as_loaded(race_file):
    before = race_file.read_bytes()
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await until(pilot, lambda: app.results)
    assert app.messages == []  # nothing saved
    assert app.results == [load_race(race_file)]
    assert race_file.read_bytes() == before  # nothing to save, nothing written


@pytest.mark.anyio
async def test_setup_is_edited_and_a_cache_needs_its_key(race_file):
    app = Host(race_file)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        form = await open_section(pilot, "setup")
        put(form, "command", "python3 -m venv .venv")
        put(form, "cache", ".venv")
        await pilot.press("ctrl+s")
        await checked(pilot, form)
        assert app.screen is form
        assert error(form, "cache").startswith("cache needs cache_key")
        put(form, "cache_key", "requirements*.txt")
        await done(pilot, form)
        await save(pilot, app)
    setup = load_race(race_file).setup
    assert (setup.command, setup.cache, setup.cache_key) == (
        ("python3", "-m", "venv", ".venv"),
        (".venv",),
        ("requirements*.txt",),
    )


def test_the_forms_cover_every_key_a_race_file_holds():
    from outpost_tui.engine.core.spec import CandidateSpec
    from outpost_tui.engine.racefile import schema
    from outpost_tui.ui.form_sections import CANDIDATE_FIELDS, SECTIONS

    in_forms = {field.key for section in SECTIONS.values() for field in section.fields}
    declared = set()
    for table, cls in schema.sections().items():
        for option in schema.options(cls):
            if option.kind == "table":  # tokens: one field per dimension
                declared |= {(table, option.name, inner.name) for inner in schema.options(option.nested)}
            else:
                declared.add((table, option.name))
    assert declared - in_forms == set()  # [prices] tables of models are kept as the file has them
    fields = {field.key: field for field in SECTIONS["sandbox"].fields}
    # the isolation modes offered as a choice (the spec's own), the writable paths as a list
    assert (fields[("sandbox", "isolation")].kind, fields[("sandbox", "isolation")].choices) == (
        "choice",
        ("auto", "bubblewrap", "none"),
    )
    assert fields[("sandbox", "writable")].kind == "words"
    assert {option.name for option in schema.options(CandidateSpec)} == {
        field.key[0] for field in CANDIDATE_FIELDS
    }


def test_an_empty_fields_hint_typed_in_is_the_keys_default():
    """The forms take what an empty field means from the schema's defaults: typed into the field,
    the hint reads as the very default the reader applies when the key is absent."""
    from outpost_tui.engine.racefile import schema
    from outpost_tui.ui.field_text import field_value_of
    from outpost_tui.ui.form_sections import CANDIDATE_FIELDS, SECTIONS, declaration

    fields = [field for section in SECTIONS.values() for field in section.fields if field.kind != "prices"]
    checked = set()
    for field in [*fields, *CANDIDATE_FIELDS]:
        default = declaration(field.key).default
        if default is schema.REQUIRED or default is None or not isinstance(default, (bool, int, float, str)):
            continue  # no value to type: the form's own words say what an empty field means
        assert field_value_of(field, field.hint) == default, (field.key, field.hint, default)
        checked.add(field.key)
    # a timeout, a mode, a flag, a version, a count: each kind of default that is a value
    expected = {
        ("validate", "timeout"),
        ("race", "mode"),
        ("durability", "enabled"),
        ("durability", "version"),
    }
    assert expected | {("setup", "ports")} <= checked


@pytest.mark.anyio
async def test_a_race_file_broken_since_it_was_opened_is_said_not_configured(race_file):
    from outpost_tui.ui.app import OutpostApp

    app = OutpostApp(race_file, testing=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        race_file.write_text(race_file.read_text() + "\n[budget\n")
        await pilot.press("f5")
        await pilot.pause()
        assert not isinstance(app.screen, ConfigureScreen)
        notes = [str(note.message) for note in app._notifications]
        said = f"cannot configure: {race_file}:"
        assert any(note.startswith(said) and "invalid TOML" in note for note in notes)


@pytest.mark.anyio
async def test_prices_are_edited_a_line_per_model(race_file):
    text = race_file.read_text()
    race_file.write_text(
        text.replace("[[candidates]]", '[prices."kept-model"]\ninput = 1  # my own rate\n\n[[candidates]]', 1)
    )
    app = Host(race_file)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        form = await open_section(pilot, "prices")
        assert form.query_one("#prices", TextArea).text == "kept-model input=1"
        put(form, "prices", "kept-model input=1\n'big model' input=-1")
        await pilot.press("ctrl+s")
        await checked(pilot, form)
        assert app.screen is form and error(form, "prices") == "must be 0 or more, found -1"
        put(form, "prices", "kept-model input=1\n'big model' input=3 output=15")
        await done(pilot, form)
        await save(pilot, app)
    prices = load_race(race_file).prices
    assert (prices["big model"].input, prices["big model"].output, prices["kept-model"].input) == (3, 15, 1)
    assert "input = 1  # my own rate" in race_file.read_text()
    assert run_cli("check", race_file).returncode == 0
