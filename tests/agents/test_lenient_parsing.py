"""Shapes drift between CLI versions: any field of any line may be missing or of another type.

Every JSON transcript line is decoded again with each field (at any depth) replaced by a value of
another type; decoding and finishing must never raise, since an exception would fail the attempt.
"""

from __future__ import annotations

import copy
import json

import pytest

from tests.agents.replay import TRANSCRIPTS, decoder_for

REPLACEMENTS = ("x", 1, None, [], {}, 1.5, True, [1, "a"], {"a": 1})


def _paths(value, prefix=()):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield prefix + (key,)
            yield from _paths(inner, prefix + (key,))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield prefix + (index,)
            yield from _paths(inner, prefix + (index,))


def _replaced(value, path, new):
    value = copy.deepcopy(value)
    target = value
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return value


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini", "opencode"])
def test_every_field_may_have_any_type(agent):
    decoded = 0
    for path in sorted(TRANSCRIPTS.glob(f"{agent}_*.json*")):
        for line in path.read_text().splitlines():
            message = json.loads(line)
            for item in message if isinstance(message, list) else [message]:
                for field in _paths(item):
                    for new in REPLACEMENTS:
                        decoder = decoder_for(agent)
                        decoder.decode([json.dumps(_replaced(item, field, new))])
                        decoder.decode(["not json", "[1, 2", '{"type": 5}'])
                        decoder.finish(1, "")
                        decoded += 1
    assert decoded > 500
