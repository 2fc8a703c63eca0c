"""The real agent CLIs (pinned in ./versions, installed outside the checkout by
.ci/install-agents.sh, in $OUTPOST_AGENTS_DIR or ~/.cache/outpost-tui/agents),
run against the stand-in model server on 127.0.0.1.

Without the programs these tests skip with the reason; under CI=true that is a failure, so CI can
never pass by skipping them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path

import pytest

from tests.agents.real.model_server import ModelServer
from tests.conftest import git

ROOT = Path(__file__).resolve().parents[3]
PINS = Path(__file__).with_name("versions")
# outside the checkout: the installed packages carry files of their own that the repository must not hold
AGENTS = Path(
    os.environ.get("OUTPOST_AGENTS_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "outpost-tui" / "agents"
)
BIN_DIRS = (AGENTS / "node_modules" / ".bin", AGENTS / "venv" / "bin")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
SAMPLE_PROJECT = ROOT / "sample-races" / "projects" / "calc"


def pinned() -> dict[str, tuple[str, str, str]]:
    """program -> (installer, package, version) from ./versions."""
    pins = {}
    for line in PINS.read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            program, installer, package, version = fields
            pins[program] = (installer, package, version)
    return pins


def program_path(program: str) -> Path:
    """The installed program, or a skip (a failure under CI=true) saying how to install it."""
    for directory in BIN_DIRS:
        candidate = directory / program
        if candidate.exists():
            return candidate
    reason = f"{program} {pinned()[program][2]} is not installed in {AGENTS} (run .ci/install-agents.sh)"
    if IN_CI:
        pytest.fail(f"CI=true and the real-program tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def agent_path(program: str) -> str:
    """PATH with the pinned programs first."""
    program_path(program)
    return os.pathsep.join([*(str(d) for d in BIN_DIRS), os.environ.get("PATH", "")])


@pytest.fixture
def model_server():
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def agent_home(tmp_path) -> Path:
    """A private HOME: the CLIs write their settings and sessions there, never in the user's."""
    home = tmp_path / "home"
    home.mkdir()
    return home


def claude_env(server: ModelServer | str, home: Path) -> dict[str, str]:
    return {
        "PATH": agent_path("claude"),
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": server if isinstance(server, str) else server.url,
        "ANTHROPIC_API_KEY": "sk-ant-stand-in",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


# Codex refuses to make its sandbox's helper programs in a CODEX_HOME under the temporary
# directory, and an isolated candidate's TMPDIR is /tmp, where pytest keeps HOME: its homes live
# here instead, removed when the session ends (the engine lets the agent write its CODEX_HOME).
CODEX_HOMES = Path(os.path.expanduser("~/.cache/outpost-tui/test-codex-homes")) / str(os.getpid())


@pytest.fixture(autouse=True, scope="session")
def codex_homes_removed():
    yield
    shutil.rmtree(CODEX_HOMES, ignore_errors=True)


def codex_env(server_url: str, home: Path, *, retries: int = 0) -> dict[str, str]:
    """Codex with a custom provider (this version ignores OPENAI_BASE_URL) in a private CODEX_HOME."""
    codex_home = CODEX_HOMES / hashlib.sha256(str(home).encode()).hexdigest()[:16]
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model_provider = "stand-in"\n\n'
        "[model_providers.stand-in]\n"
        'name = "stand-in"\n'
        f'base_url = "{server_url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\n'
        f"request_max_retries = {retries}\n"
        f"stream_max_retries = {retries}\n"
        "supports_websockets = false\n"
    )
    return {
        "PATH": agent_path("codex"),
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "OPENAI_API_KEY": "sk-stand-in",
    }


def gemini_env(server_url: str, home: Path) -> dict[str, str]:
    """Gemini CLI on an API key against the stand-in: the auth type lives in its settings file."""
    settings = home / ".gemini"
    settings.mkdir(exist_ok=True)
    (settings / "settings.json").write_text('{"security": {"auth": {"selectedType": "gemini-api-key"}}}')
    return {
        "PATH": agent_path("gemini"),
        "HOME": str(home),
        "GEMINI_API_KEY": "stand-in-key",
        "GOOGLE_GEMINI_BASE_URL": server_url,
    }


def opencode_env(server_url: str, home: Path, model: str = "gpt-4o") -> dict[str, str]:
    """opencode with a custom @ai-sdk/openai-compatible provider "stand-in" (its config inline),
    its data and caches in the private HOME, no fetch of the models.dev catalogue."""
    config = {
        "provider": {
            "stand-in": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "stand-in",
                "options": {"baseURL": f"{server_url}/v1", "apiKey": "sk-stand-in"},
                "models": {model: {"name": model}},
            }
        }
    }
    return {
        "PATH": agent_path("opencode"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
    }


def aider_env(server_url: str | None, home: Path) -> dict[str, str]:
    """aider through litellm's OpenAI client (OPENAI_API_BASE); None: no key at all."""
    env = {"PATH": agent_path("aider"), "HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if server_url is not None:
        env.update(OPENAI_API_KEY="sk-stand-in", OPENAI_API_BASE=f"{server_url}/v1")
    return env


def project(tmp_path: Path) -> Path:
    """The sample calc project (add() is broken) as a fresh repository."""
    repo = tmp_path / "project"
    shutil.copytree(SAMPLE_PROJECT, repo, ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.invalid")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "calc with a bug in add()")
    return repo


def closed_port_url() -> str:
    """A 127.0.0.1 URL where nothing listens (the port was just free)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
