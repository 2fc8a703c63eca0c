"""`outpost-tui check RACE.toml`: validate a race file without running it."""

from __future__ import annotations

import argparse
import json
import shlex
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.core.spec import RaceSpec

EPILOG = """\
examples:
  outpost-tui check race.toml          print a summary, or the one line that is wrong
  outpost-tui check race.toml --json   {"ok": true, ...} on stdout

exit codes: 0 the race file is valid, 2 it is not (the error names file, line and key)
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check",
        help="validate a race file without running it",
        description="Validate a race file (syntax, keys, types, the repository, agents and paths)\n"
        "without running anything or writing anything.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("race", metavar="RACE.toml", help="the race file to check")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON document on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `outpost-tui --help` builds every command's parser.
    from ..engine.racefile import RaceFileError, load_race

    try:
        spec = load_race(args.race)
    except RaceFileError as error:
        if args.json:
            print(
                json.dumps(
                    {
                        "ok": False,
                        "error": {
                            "path": error.path,
                            "line": error.line,
                            "key": error.key,
                            "message": error.message,
                        },
                    }
                )
            )
        raise
    if args.json:
        print(json.dumps({"ok": True, **summary(spec)}, indent=2))
    else:
        print(render(args.race, spec))
    return 0


def summary(spec: RaceSpec) -> dict[str, Any]:
    from ..engine.verdict.reports import report_source

    budget = spec.budget
    return {
        "path": str(spec.path) if spec.path else None,
        "name": spec.name,
        "mode": spec.mode,
        "select": spec.select,
        "concurrency": spec.effective_concurrency,
        "repository": str(spec.repository),
        "base": spec.base,
        "run_id": spec.run_id,
        "candidates": [
            {"key": candidate.key, "agent": candidate.agent, "model": candidate.model}
            for candidate in spec.candidates
        ],
        "budget": {
            "attempts": budget.attempts,
            "tokens": dict(budget.tokens.items()),
            "cost_usd": budget.cost_usd,
            "candidate_timeout": budget.candidate_timeout,
            "unreachable_timeout": budget.unreachable_timeout,
        },
        "validate": {
            "command": list(spec.validate.command) if spec.validate.command else None,
            "timeout": spec.validate.timeout,
            "require_commits": spec.validate.require_commits,
            "junit": spec.validate.junit,
            "gate": spec.validate.gate,
            "allow_baseline_failures": spec.validate.allow_baseline_failures,
            "repeat": spec.validate.repeat,
            "protect": None if spec.validate.protect is None else list(spec.validate.protect),
            "protect_mode": spec.validate.protect_mode,
            "results": report_source(spec.validate.command, spec.validate.junit),
        },
        "sandbox": {
            "provider": spec.sandbox.provider,
            "image": spec.sandbox.image,
            "network": spec.sandbox.network,
        },
        "setup": {
            "command": list(spec.setup.command) if spec.setup.command else None,
            "timeout": spec.setup.timeout,
            "cache": list(spec.setup.cache),
            "cache_key": list(spec.setup.cache_key),
            "copy": list(spec.setup.copy),
            "ports": spec.setup.ports,
        },
        "durable": spec.durability.enabled,
    }


def render(shown_path: str, spec: RaceSpec) -> str:
    mode = f"{spec.mode}, select {spec.select}, up to {spec.effective_concurrency} at once"
    rows = [
        ("race", f"{spec.name} ({mode})"),
        ("repository", f"{spec.repository} @ {spec.base}"),
        (
            "candidates",
            f"{len(spec.candidates)}: "
            + ", ".join(f"{c.key} ({c.agent}{', ' + c.model if c.model else ''})" for c in spec.candidates),
        ),
        ("budget", _budget_text(spec)),
        (
            "validate",
            (shlex.join(spec.validate.command) if spec.validate.command else "none")
            + (f" (timeout {_seconds(spec.validate.timeout)})" if spec.validate.timeout else ""),
        ),
        ("verdict", _verdict_text(spec)),
        (
            "sandbox",
            spec.sandbox.provider
            + (f" {spec.sandbox.image}" if spec.sandbox.image else "")
            + f", network {spec.sandbox.network}",
        ),
    ]
    if spec.setup.enabled:
        rows.append(("setup", spec.setup.describe()))
    if spec.durability.enabled:
        rows.append(("durable", f"yes (run id {spec.run_id or 'generated'})"))
    width = max(len(label) for label, _ in rows)
    return "\n".join([f"{shown_path}: ok"] + [f"  {label:<{width}}  {text}" for label, text in rows])


def _verdict_text(spec: RaceSpec) -> str:
    from ..engine.verdict.reports import report_source

    validate = spec.validate
    parts = [f"gate {validate.gate}"]
    if validate.allow_baseline_failures:
        parts.append("baseline failures allowed")
    if validate.repeat:
        parts.append(f"failing runs repeated up to {validate.repeat}x")
    protected = (
        "default test and runner paths"
        if validate.protect is None
        else (", ".join(validate.protect) or "nothing")
    )
    parts.append(f"protected: {protected} ({validate.protect_mode})")
    parts.append(f"results from {report_source(validate.command, validate.junit)}")
    return ", ".join(parts)


def _budget_text(spec: RaceSpec) -> str:
    from ..engine.core.spec import BudgetSpec

    budget = spec.budget
    parts = []
    if budget.attempts is not None:
        parts.append(f"{budget.attempts} attempts")
    parts += [f"{name} tokens <= {limit:,}" for name, limit in budget.tokens.items()]
    if budget.cost_usd is not None:
        parts.append(f"${budget.cost_usd:.2f}")
    if budget.candidate_timeout is not None:
        parts.append(f"{_seconds(budget.candidate_timeout)} per candidate")
    if (
        budget.unreachable_timeout is not None
        and budget.unreachable_timeout != BudgetSpec().unreachable_timeout
    ):
        parts.append(f"model API unreachable for {_seconds(budget.unreachable_timeout)} fails a candidate")
    return ", ".join(parts) or "unlimited"


def _seconds(value: float) -> str:
    return f"{value:g}s"
