"""The race file's keys are declared once, on the spec: the reader, the writer and the docs agree."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from outpost_tui.engine.core import spec
from outpost_tui.engine.racefile import schema

DOCS = Path(__file__).resolve().parents[2] / "docs" / "race-file.md"


def documented_tables() -> dict[str, str]:
    """Each `## heading` of docs/race-file.md and the first Markdown table under it."""
    tables: dict[str, str] = {}
    for section in re.split(r"^## ", DOCS.read_text(), flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        rows = []
        for line in body.splitlines():
            if line.startswith("|"):
                rows.append(line)
            elif rows:
                break
        if rows:
            tables[heading.strip()] = "\n".join(rows)
    return tables


@pytest.mark.parametrize("heading", list(schema.key_tables()))
def test_the_docs_key_table_is_the_declarations(heading: str):
    expected = schema.key_tables()[heading]
    assert documented_tables().get(heading) == expected, (
        f"docs/race-file.md's table under '## {heading}' differs from the declarations in "
        f"outpost_tui/engine/core/spec.py; it should read:\n\n{expected}\n"
    )


def test_every_documented_table_is_declared():
    assert set(documented_tables()) == set(schema.key_tables())


def test_the_docs_name_every_top_level_key_and_price_dimension():
    text = DOCS.read_text()
    general = text[text.index("General rules") : text.index("## ")]
    listed = re.findall(r"`\[\[?([a-z]+)\]\]?`", general)
    assert listed == schema.top_keys()
    prices = text[text.index("## `[prices]`") :]
    prices = prices[: prices.index("\n## ")]
    assert re.findall(r"`([a-z_]+)`", prices.split("\n\n")[1])[:4] == schema.names(spec.Price)


def test_every_setting_has_a_kind_and_words_for_the_docs():
    for cls in [*schema.sections().values(), spec.CandidateSpec, spec.Price, spec.TokenLimits]:
        for option in schema.options(cls):
            assert option.kind in (
                "string",
                "choice",
                "integer",
                "number",
                "boolean",
                "strings",
                "argv",
                "env",
                "file",
                "table",
            ), (cls.__name__, option.name)
            if cls not in (spec.Price, spec.TokenLimits) and option.name not in ("cpus", "pids"):
                assert option.key.rules, f"{cls.__name__}.{option.name} has no rules for the docs"


def test_a_field_without_a_declaration_is_not_a_key():
    """Python-only fields (callables, the file's own path) are neither read nor written."""
    assert "check" not in schema.names(spec.ValidateSpec) and "check" not in schema.names(spec.ScoreSpec)
    assert "path" not in schema.names(spec.RaceSpec)
    declared = {
        field.name
        for field in dataclasses.fields(spec.RaceSpec)
        if "key" in field.metadata or "table" in field.metadata
    }
    assert declared | {"path"} == {field.name for field in dataclasses.fields(spec.RaceSpec)}
