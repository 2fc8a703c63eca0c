import inspect

import pytest

from tests.ui.support import footer_settled


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(autouse=True)
def no_user_configuration(monkeypatch, tmp_path_factory):
    """A developer's own themes and keymap must not change what the tests see."""
    monkeypatch.setenv("OUTPOST_TUI_CONFIG_DIR", str(tmp_path_factory.mktemp("outpost-config")))
    monkeypatch.delenv("OUTPOST_TUI_THEME", raising=False)


@pytest.fixture(autouse=True)
def state_of_its_own(tmp_path, monkeypatch):
    """The engine's state (flight logs' seals above all) in each test's own directory: the
    pictures' recorded races share one race id, and a seal another test left for it would make
    this test's flight log look tampered."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def snap_compare(snap_compare):
    """Every picture waits for the footer to show the screen's bindings as they are, after the
    test's steps and keys: on a loaded machine the plugin's own idle wait (by process CPU time) can
    end before the footer rebuilds."""

    def compare(app, *, press=(), run_before=None, **kwargs):
        # the keys are pressed here, not by the plugin, so that the wait comes after them too
        async def settled(pilot) -> None:
            if run_before is not None and inspect.isawaitable(done := run_before(pilot)):
                await done
            if press:
                await pilot.press(*press)
            await footer_settled(pilot)

        return snap_compare(app, run_before=settled, **kwargs)

    return compare
