"""The tests' own pid service (tests/fixtures/host_pids.py) outlives its callers: a candidate killed
while asking (a loser's daemon, cancelled mid-question) once ended the thread that answers, and every
later test of that worker that waited for a pid hung until its timeout."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from tests.fixtures import host_pids


def test_a_caller_that_dies_mid_question_leaves_the_service_answering(tmp_path: Path, monkeypatch):
    path = tmp_path / "pids.sock"
    host_pids.serve(path)
    monkeypatch.setenv(host_pids.VARIABLE, str(path))
    for _ in range(3):  # gone before it asked: the answer meets a closed socket
        with socket.socket(socket.AF_UNIX) as caller:
            caller.connect(str(path))
    assert host_pids.ask("self") == [os.getpid()]
