"""State a candidate forged under .outpost/, met through the command line: a checkpoint edited to
name another winner is refused by `recover --replay` in one line (exit 6) and never produces that
winner; a flight log rewritten to claim a win is "tampered" in `history` and refused by `show`.
Each beside its control: the same edit sealed with the real key, or the log untouched."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from outpost_tui import exitcodes
from outpost_tui.engine.durable.checkpoint import checkpoint_key, sealed_envelope
from outpost_tui.engine.durable.local_transport import LocalTransport
from tests.cli.support import fake_candidate, run_cli, write_race

RUN_ID = "forged-run"
VALIDATE = Path(__file__).parents[1] / "fixtures" / "agents" / "validate.py"


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))  # the commands run below inherit it
    return home


def durable_race(tmp_path: Path, repo: Path) -> dict:
    """A finished durable run: `bad` rejected, `good` the winner."""
    candidates = fake_candidate("bad", "--write", "fix.txt", "--content", "bad", "--commit") + fake_candidate(
        "good", "--write", "fix.txt", "--content", "good", "--commit"
    )
    path = write_race(
        tmp_path / "race.toml",
        repo,
        candidates,
        extra=f'run_id = "{RUN_ID}"\nmode = "fallback"',
        sections=f"[validate]\ncommand = {json.dumps([sys.executable, str(VALIDATE)])}\n\n"
        '[durability]\nenabled = true\nversion = "1"\n\n[sandbox]\nisolation = "none"\n',
    )
    done = run_cli("run", path, "--headless", "--json")
    assert done.returncode == exitcodes.WINNER, done.stderr
    result = json.loads(done.stdout)
    assert result["winner"]["key"] == "good"
    return result


def forged_state(repo: Path) -> tuple[LocalTransport, str, str, str, str]:
    """The checkpoint edited as a candidate would like it: bad#1 won with its own commit."""
    transport = LocalTransport(repo / ".outpost" / "storage")
    key = checkpoint_key(RUN_ID)
    envelope = json.loads(transport.read(key).data)
    state = envelope["state"]
    by_key = {a["key"]: a for a in state["attempts"]}
    by_key["bad"]["record"]["status"], by_key["good"]["record"]["status"] = "winner", "rejected"
    for record in state["result"]["candidates"]:
        record["status"] = "winner" if record["key"] == "bad" else "rejected"
    state["result"]["winner"] = by_key["bad"]["record"]
    owner = json.dumps(envelope["owner"])
    return transport, key, owner, json.dumps(state, separators=(",", ":")), envelope["seal"]


def replay(repo: Path):
    return run_cli("recover", RUN_ID, "--repo", repo, "--replay", "--json")


def test_a_checkpoint_forged_to_name_another_winner_never_produces_it_on_replay(tmp_path, repo):
    durable_race(tmp_path, repo)
    transport, key, owner, state, old_seal = forged_state(repo)
    body = f'{{"format":1,"owner":{owner},"state":{state}'.encode()
    transport.write(key, body + f',"seal":"{old_seal}"}}'.encode(), if_revision=transport.read(key).revision)
    forged = transport.object_path(key).read_bytes()

    done = replay(repo)
    assert done.returncode == exitcodes.CORRUPT_CHECKPOINT and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert f"run {RUN_ID}:" in line and "does not match its seal" in line
    assert transport.object_path(key).read_bytes() == forged  # left as it was found
    inspected = run_cli("recover", RUN_ID, "--repo", repo, "--inspect")
    assert inspected.returncode == exitcodes.CORRUPT_CHECKPOINT and len(inspected.stderr.splitlines()) == 1

    # control: the same forgery sealed with the key (which no candidate holds) would have won
    transport.write(key, sealed_envelope(key, owner, state), if_revision=transport.read(key).revision)
    believed = replay(repo)
    assert believed.returncode == exitcodes.WINNER, believed.stderr
    assert json.loads(believed.stdout)["winner"]["key"] == "bad"


def test_control_an_untouched_checkpoint_replays_its_own_winner(tmp_path, repo):
    durable_race(tmp_path, repo)
    done = replay(repo)
    assert done.returncode == exitcodes.WINNER, done.stderr
    assert json.loads(done.stdout)["winner"]["key"] == "good"


def test_a_flight_log_rewritten_to_claim_a_win_is_tampered_in_history_and_refused_by_show(tmp_path, repo):
    result = durable_race(tmp_path, repo)
    listed = run_cli("history", repo)
    assert listed.returncode == 0
    [line] = listed.stdout.splitlines()
    assert " winner " in line and " good " in line and "unsealed" not in line  # control first

    race_file = repo / ".outpost" / "runs" / result["id"] / "race.jsonl"
    race_file.write_text(race_file.read_text().replace('"winner":"good"', '"winner":"bad"'))
    listed = run_cli("history", repo)
    [line] = listed.stdout.splitlines()
    assert " tampered " in line and " bad " not in line
    assert "race.jsonl changed after the race wrote it" in line
    assert json.loads(run_cli("history", repo, "--json").stdout)[0]["winner"] is None
    for mode in ("--json", "--headless"):
        shown = run_cli("show", result["id"], "--repo", repo, mode)
        assert shown.returncode == exitcodes.CORRUPT_CHECKPOINT and shown.stdout == ""
        [refused] = shown.stderr.splitlines()
        assert "does not match its flight log's seal" in refused and "nothing it says is shown" in refused


def test_a_flight_log_with_no_seal_is_shown_with_a_warning(tmp_path, repo, state_home):
    result = durable_race(tmp_path, repo)
    (state_home / "outpost-tui" / "flight-logs" / f"{result['id']}.json").unlink()
    [line] = run_cli("history", repo).stdout.splitlines()
    assert line.endswith("(unsealed)")
    shown = run_cli("show", result["id"], "--repo", repo, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["winner"]["key"] == "good"
    [warning] = shown.stderr.splitlines()
    assert "has no seal" in warning
