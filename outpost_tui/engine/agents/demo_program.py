"""The demo agent program: plays a scripted coding session, speaking the command-agent protocol.

Run as `python -m outpost_tui.engine.agents.demo_program SCRIPT.toml` in a worktree, with the brief
on stdin (and in OUTPOST_BRIEF). The script is TOML: `[session] pace` scales every pause (the
OUTPOST_DEMO_PACE environment variable overrides it; tests use 0) and `[[steps]]` is the session.
It is a real program doing real work (files, subprocesses, git commits), so races of demo agents
exercise the engine exactly as real agents do, offline and for free.

Exit codes: 0 the script ran to its end, 1 quota reached, 2 bad script, 3 a step could not be
carried out, N from `exit = N` or from a failing `run` with `check = true`.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PROG = "demo_program"
BAD_SCRIPT = 2
STEP_FAILED = 3
QUOTA = 1
GIT_IDENTITY = ("-c", "user.name=demo-agent", "-c", "user.email=demo@outpost.invalid")
USAGE_FIELDS = ("input", "cached", "cache_write", "output")
SPAM_CHUNK = 2000


class ScriptError(Exception):
    """The script cannot be played; the message is one line naming where."""


class StepFailed(Exception):
    """A step could not be carried out (for example `replace` found nothing to replace)."""


class Ended(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# --- output -------------------------------------------------------------------------------------


def emit(line: str) -> None:
    """One stdout line, flushed at once so the engine sees it live."""
    out = sys.stdout.buffer
    out.write(line.encode("utf-8", "replace") + b"\n")
    out.flush()


def emit_json(message: dict[str, Any]) -> None:
    emit(json.dumps(message, ensure_ascii=False))


# --- script parsing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    index: int  # 1-based, as a person counts [[steps]]
    action: str
    value: Any
    options: dict[str, Any]

    @property
    def where(self) -> str:
        return f"steps[{self.index}] ({self.action})"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _string(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ScriptError(f"{where}: '{key}' must be a string")
    return value


def _string_list(where: str, key: str, value: Any, allow_single: bool) -> list[str]:
    if allow_single and isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        kind = "a string or a list of strings" if allow_single else "a list of strings"
        raise ScriptError(f"{where}: '{key}' must be {kind}")
    return list(value)


def _table(
    where: str, key: str, value: Any, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ScriptError(f"{where}: '{key}' must be a table")
    for name in value:
        if name not in required + optional:
            raise ScriptError(
                f"{where}: unknown key '{key}.{name}' (expected {', '.join(required + optional)})"
            )
    for name in required:
        if name not in value:
            raise ScriptError(f"{where}: '{key}' needs '{name}'")
    return value


def _check_say(where: str, value: Any, options: dict[str, Any]) -> Any:
    return _string(where, "say", value)


def _check_log(where: str, value: Any, options: dict[str, Any]) -> Any:
    return _string_list(where, "log", value, allow_single=True)


def _check_tool(where: str, value: Any, options: dict[str, Any]) -> Any:
    _string(where, "tool", value)
    if "input" in options:
        _string(where, "input", options["input"])
    if "output" in options:
        options["output"] = _string_list(where, "output", options["output"], allow_single=True)
    return value


def _check_usage(where: str, value: Any, options: dict[str, Any]) -> Any:
    table = _table(where, "usage", value, (), USAGE_FIELDS + ("cost_usd",))
    for name in USAGE_FIELDS:
        if name in table and not (_is_int(table[name]) and table[name] >= 0):
            raise ScriptError(f"{where}: 'usage.{name}' must be a whole number >= 0")
    if "cost_usd" in table and not (_is_number(table["cost_usd"]) and table["cost_usd"] >= 0):
        raise ScriptError(f"{where}: 'usage.cost_usd' must be a number >= 0")
    return table


def _check_pause(where: str, value: Any, options: dict[str, Any]) -> Any:
    if not (_is_number(value) and value >= 0):
        raise ScriptError(f"{where}: 'pause' must be a number of seconds >= 0")
    return float(value)


def _check_write(where: str, value: Any, options: dict[str, Any]) -> Any:
    table = _table(where, "write", value, ("path", "content"))
    _string(where, "write.path", table["path"])
    _string(where, "write.content", table["content"])
    return table


def _check_replace(where: str, value: Any, options: dict[str, Any]) -> Any:
    table = _table(where, "replace", value, ("path", "old", "new"))
    for name in ("path", "old", "new"):
        _string(where, f"replace.{name}", table[name])
    if not table["old"]:
        raise ScriptError(f"{where}: 'replace.old' must not be empty")
    return table


def _check_run(where: str, value: Any, options: dict[str, Any]) -> Any:
    argv = _string_list(where, "run", value, allow_single=False)
    if not argv:
        raise ScriptError(f"{where}: 'run' must name a program")
    if "check" in options and not isinstance(options["check"], bool):
        raise ScriptError(f"{where}: 'check' must be true or false")
    return argv


def _check_commit(where: str, value: Any, options: dict[str, Any]) -> Any:
    message = _string(where, "commit", value)
    if not message.strip():
        raise ScriptError(f"{where}: 'commit' needs a message")
    return message


def _check_quota(where: str, value: Any, options: dict[str, Any]) -> Any:
    _string(where, "quota", value)
    if "reset_in" in options and not (_is_number(options["reset_in"]) and options["reset_in"] >= 0):
        raise ScriptError(f"{where}: 'reset_in' must be a number of seconds >= 0")
    return value


def _check_exit(where: str, value: Any, options: dict[str, Any]) -> Any:
    if not (_is_int(value) and 0 <= value <= 255):
        raise ScriptError(f"{where}: 'exit' must be a whole number from 0 to 255")
    return value


def _check_spam(where: str, value: Any, options: dict[str, Any]) -> Any:
    if not (_is_int(value) and value >= 0):
        raise ScriptError(f"{where}: 'spam' must be a whole number >= 0")
    return value


def _check_wait(where: str, value: Any, options: dict[str, Any]) -> Any:
    if value != "forever":
        raise ScriptError(f"{where}: 'wait' must be \"forever\"")
    return value


def _check_echo_brief(where: str, value: Any, options: dict[str, Any]) -> Any:
    if value is not True:
        raise ScriptError(f"{where}: 'echo_brief' must be true")
    if "to" in options:
        _string(where, "to", options["to"])
    return value


# action -> (validator, modifier keys it accepts)
ACTIONS: dict[str, tuple[Callable[[str, Any, dict[str, Any]], Any], tuple[str, ...]]] = {
    "say": (_check_say, ()),
    "log": (_check_log, ()),
    "tool": (_check_tool, ("input", "output")),
    "usage": (_check_usage, ()),
    "pause": (_check_pause, ()),
    "write": (_check_write, ()),
    "replace": (_check_replace, ()),
    "run": (_check_run, ("check",)),
    "commit": (_check_commit, ()),
    "quota": (_check_quota, ("reset_in",)),
    "exit": (_check_exit, ()),
    "spam": (_check_spam, ()),
    "wait": (_check_wait, ()),
    "echo_brief": (_check_echo_brief, ("to",)),
}


def parse_step(index: int, raw: Any) -> Step:
    where = f"steps[{index}]"
    if not isinstance(raw, dict):
        raise ScriptError(f"{where}: a step must be a table")
    actions = [key for key in raw if key in ACTIONS]
    if len(actions) != 1:
        found = f"found {', '.join(actions)}" if actions else "found none"
        raise ScriptError(f"{where}: a step needs exactly one of {', '.join(ACTIONS)} ({found})")
    action = actions[0]
    check, modifiers = ACTIONS[action]
    options = {key: value for key, value in raw.items() if key != action}
    for key in options:
        if key not in modifiers:
            allowed = f" (allowed with '{action}': {', '.join(modifiers)})" if modifiers else ""
            raise ScriptError(f"{where}: unknown key '{key}'{allowed}")
    value = check(f"{where} ({action})", raw[action], options)
    return Step(index, action, value, options)


@dataclass(frozen=True)
class Script:
    pace: float
    steps: tuple[Step, ...]


def parse_pace(text: str, origin: str) -> float:
    try:
        pace = float(text)
    except ValueError:
        raise ScriptError(f"{origin}: pace must be a number, got {text!r}") from None
    if not (math.isfinite(pace) and pace >= 0):
        raise ScriptError(f"{origin}: pace must be a number >= 0, got {text!r}")
    return pace


def load_script(path: Path, environ: dict[str, str]) -> Script:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScriptError(f"script not found: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ScriptError(f"cannot read script {path}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ScriptError(f"{path}: invalid TOML: {error}") from None
    try:
        for key in data:
            if key not in ("session", "steps"):
                raise ScriptError(f"unknown key '{key}' (expected [session] and [[steps]])")
        session = data.get("session", {})
        if not isinstance(session, dict):
            raise ScriptError("'session' must be a table")
        for key in session:
            if key != "pace":
                raise ScriptError(f"unknown key 'session.{key}' (expected pace)")
        pace = session.get("pace", 1.0)
        if not (_is_number(pace) and pace >= 0):
            raise ScriptError("'session.pace' must be a number >= 0")
        raw_steps = data.get("steps", [])
        if not isinstance(raw_steps, list):
            raise ScriptError("'steps' must be an array of tables ([[steps]])")
        steps = tuple(parse_step(index, raw) for index, raw in enumerate(raw_steps, start=1))
        if "OUTPOST_DEMO_PACE" in environ:
            pace = parse_pace(environ["OUTPOST_DEMO_PACE"], "OUTPOST_DEMO_PACE")
        return Script(float(pace), steps)
    except ScriptError as error:
        raise ScriptError(f"{path}: {error}") from None


# --- playing ------------------------------------------------------------------------------------


class Session:
    def __init__(self, script: Script, brief: bytes, cwd: Path) -> None:
        self.script = script
        self.brief = brief
        self.cwd = cwd
        self.last_exit_code: int | None = None

    def play(self) -> int:
        for step in self.script.steps:
            getattr(self, f"do_{step.action}")(step)
        return 0

    def path(self, relative: str) -> Path:
        return self.cwd / relative

    def do_say(self, step: Step) -> None:
        emit_json({"kind": "text", "text": step.value})

    def do_log(self, step: Step) -> None:
        for line in step.value:
            emit(line)

    def do_tool(self, step: Step) -> None:
        emit_json({"kind": "tool", "name": step.value, "input": step.options.get("input", "")})
        for line in step.options.get("output", []):
            emit(line)

    def do_usage(self, step: Step) -> None:
        message: dict[str, Any] = {"kind": "usage"}
        for name in USAGE_FIELDS:
            message[name] = step.value.get(name, 0)
        message["cost_usd"] = step.value.get("cost_usd", 0.0)
        emit_json(message)

    def do_pause(self, step: Step) -> None:
        seconds = step.value * self.script.pace
        if seconds > 0:
            time.sleep(seconds)

    def do_write(self, step: Step) -> None:
        target = self.path(step.value["path"])
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(step.value["content"], encoding="utf-8")
        except OSError as error:
            raise StepFailed(f"{step.where}: cannot write {target}: {error.strerror or error}") from None

    def do_replace(self, step: Step) -> None:
        target = self.path(step.value["path"])
        try:
            text = target.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise StepFailed(f"{step.where}: {step.value['path']} does not exist in {self.cwd}") from None
        except (OSError, UnicodeDecodeError) as error:
            raise StepFailed(f"{step.where}: cannot read {target}: {error}") from None
        old = step.value["old"]
        if old not in text:
            raise StepFailed(f"{step.where}: {old!r} not found in {step.value['path']}")
        try:
            target.write_text(text.replace(old, step.value["new"], 1), encoding="utf-8")
        except OSError as error:
            raise StepFailed(f"{step.where}: cannot write {target}: {error.strerror or error}") from None

    def do_run(self, step: Step) -> None:
        code = self.stream(step.value)
        self.last_exit_code = code
        emit(f"[exit {code}] {' '.join(step.value)}")
        if code != 0 and step.options.get("check", False):
            raise Ended(code)

    def stream(self, argv: list[str]) -> int:
        """Runs argv in the worktree, relaying its merged output line by line as log text."""
        try:
            child = subprocess.Popen(
                argv, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except FileNotFoundError:
            emit(f"{argv[0]}: command not found")
            return 127
        except OSError as error:
            emit(f"{argv[0]}: {error.strerror or error}")
            return 126
        assert child.stdout is not None
        with child.stdout:
            for raw in child.stdout:
                emit(raw.rstrip(b"\r\n").decode("utf-8", "replace"))
        return child.wait()

    def do_commit(self, step: Step) -> None:
        identity = () if self.has_identity() else GIT_IDENTITY
        # A global commit.gpgsign could block on a pinentry prompt in an unattended agent.
        git = ("git", *identity, "-c", "commit.gpgsign=false")
        for argv in ((*git, "add", "-A"), (*git, "commit", "-m", step.value)):
            result = subprocess.run(
                argv, cwd=self.cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace"
            )
            output = (result.stdout + result.stderr).strip()
            for line in output.splitlines():
                emit(line)
            if result.returncode != 0:
                detail = output.splitlines()[-1] if output else f"exit {result.returncode}"
                raise StepFailed(f"{step.where}: git {argv[len(git)]} failed: {detail}")

    def has_identity(self) -> bool:
        for key in ("user.name", "user.email"):
            result = subprocess.run(
                ("git", "config", "--get", key),
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
            )
            if result.returncode != 0 or not result.stdout.strip():
                return False
        return True

    def do_quota(self, step: Step) -> None:
        message: dict[str, Any] = {"kind": "quota", "message": step.value}
        if "reset_in" in step.options:
            reset = datetime.now(UTC) + timedelta(seconds=step.options["reset_in"])
            message["reset_at"] = reset.replace(microsecond=0).isoformat().replace("+00:00", "Z")
        emit_json(message)
        raise Ended(QUOTA)

    def do_exit(self, step: Step) -> None:
        raise Ended(step.value)

    def do_spam(self, step: Step) -> None:
        # Throughput tests want lines as fast as possible: whole lines, written a chunk at a time.
        total = step.value
        out = sys.stdout.buffer
        for start in range(1, total + 1, SPAM_CHUNK):
            stop = min(start + SPAM_CHUNK, total + 1)
            out.write(
                "".join(
                    f"spam {number}/{total} the quick brown fox jumps over the lazy dog\n"
                    for number in range(start, stop)
                ).encode()
            )
            out.flush()

    def do_wait(self, step: Step) -> None:
        while True:
            time.sleep(3600)

    def do_echo_brief(self, step: Step) -> None:
        text = self.brief.decode("utf-8", "replace")
        emit_json({"kind": "text", "text": text})
        if "to" in step.options:
            target = self.path(step.options["to"])
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(self.brief)
            except OSError as error:
                raise StepFailed(f"{step.where}: cannot write {target}: {error.strerror or error}") from None


def fail(message: str, code: int) -> int:
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.stderr.flush()
    return code


def main(argv: list[str] | None = None) -> int:
    # An agent must stop at once when the engine cancels it: never inherit an ignored SIGTERM,
    # and let Ctrl-C end it quietly instead of with a KeyboardInterrupt traceback.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        return fail("usage: python -m outpost_tui.engine.agents.demo_program SCRIPT.toml", BAD_SCRIPT)
    try:
        script = load_script(Path(args[0]), dict(os.environ))
    except ScriptError as error:
        return fail(str(error), BAD_SCRIPT)
    # The whole brief is read before anything else, as a real agent CLI does.
    brief = sys.stdin.buffer.read() if sys.stdin is not None else b""
    try:
        return Session(script, brief, Path.cwd()).play()
    except Ended as end:
        return end.code
    except StepFailed as error:
        return fail(str(error), STEP_FAILED)


def run() -> None:
    try:
        code = main()
    except BrokenPipeError:
        # The reader went away (the engine stopped listening): nothing left to say to anyone.
        os._exit(141)
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    run()
