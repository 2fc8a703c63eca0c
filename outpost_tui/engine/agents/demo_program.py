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
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .demo_script import USAGE_FIELDS, Script, ScriptError, Step, load_script

PROG = "demo_program"
BAD_SCRIPT = 2
STEP_FAILED = 3
QUOTA = 1
GIT_IDENTITY = ("-c", "user.name=demo-agent", "-c", "user.email=demo@outpost.invalid")
SPAM_CHUNK = 2000


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
