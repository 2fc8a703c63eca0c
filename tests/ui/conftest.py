import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(autouse=True)
def no_user_configuration(monkeypatch, tmp_path_factory):
    """A developer's own themes and keymap must not change what the tests see."""
    monkeypatch.setenv("OUTPOST_TUI_CONFIG_DIR", str(tmp_path_factory.mktemp("outpost-config")))
    monkeypatch.delenv("OUTPOST_TUI_THEME", raising=False)
