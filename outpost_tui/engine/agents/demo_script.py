"""The demo agent's script: a TOML file read and checked whole before anything is played.

`[session] pace` scales every pause (OUTPOST_DEMO_PACE overrides it) and `[[steps]]` is the session,
one action per step with its options. Separate from `demo_program` (which plays a script) so that a
bad script is refused with one line naming the step and key before any file is touched.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

USAGE_FIELDS = ("input", "cached", "cache_write", "output")


class ScriptError(Exception):
    """The script cannot be played; the message is one line naming where."""


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
