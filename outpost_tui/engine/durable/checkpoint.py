"""A durable race's saved state and who owns it.

The state is one envelope `{"format": 1, "owner": Owner | null, "state": {...}}` stored through a
Transport under `speculations/<sha256hex(run_id)>.json`. The coordinator builds `state` (attempts,
usage, status; never logs, so a save stays small); this module adds `identity` and `run_id` to it and
owns the rules around it:

- one owner at a time: `claim` takes a run only when nobody owns it, by compare-and-swap on the
  revision it read, so of two processes claiming at once exactly one wins;
- every save is conditional on the revision this coordinator last wrote, so once a run has been
  released (`release_run`, the recovery "release" step) and claimed again, the old coordinator's
  writes are refused (fencing);
- a garbled or truncated file, or one whose state breaks the rules of checkpoint_state, is reported
  and left untouched, never overwritten: every read checks it before anything acts on it;
- every revision carries a seal (`records.seal`: an HMAC under a key outside the repository) over
  the storage key and the envelope's text, spliced in last: `{"format":1,"owner":...,"state":...,
  "seal":"<hex>"}`. A file a candidate edited, forged or copied from another run fails it and is
  refused like a corrupt one; one with no seal (written before checkpoints were sealed, or with
  its seal cut off) is refused too: a state nobody can vouch for is never resumed, released or
  used to stop a process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import exitcodes
from ..core.spec import RaceSpec
from ..errors import OutpostError
from ..paths import real_path
from ..records import seal
from .checkpoint_state import InvalidState, check_state, run_status
from .ownership import Owner, describe_age
from .transport import CorruptObject, Transport, TransportConflict

FORMAT = 1
PREFIX = "speculations/"


class CheckpointError(OutpostError):
    """A durable-run error; the message is one line and `exit_code` is the CLI's exit status."""

    exit_code = exitcodes.BAD_INPUT


class AlreadyOwned(CheckpointError):
    exit_code = exitcodes.OWNED

    def __init__(
        self, run_id: str, owner: Owner, *, now: float | None = None, repository: str | Path | None = None
    ) -> None:
        now = time.time() if now is None else now
        self.run_id, self.owner = run_id, owner
        super().__init__(
            f"run {run_id} is already owned by a coordinator (pid {owner.pid} on {owner.host}, last "
            f"heartbeat {describe_age(now - owner.heartbeat_at)} ago): recover it step by step, "
            f"starting with `{recover_command(run_id, repository, '--stop')}`"
        )


def recover_command(run_id: str, repository: str | Path | None, step: str) -> str:
    """The recover command line for a step, runnable from any directory when the repository is known."""
    where = f" --repo {shlex.quote(str(repository))}" if repository is not None else ""
    return f"outpost-tui recover {shlex.quote(run_id)}{where} {step}"


class RevisionChanged(CheckpointError):
    exit_code = exitcodes.REVISION_CHANGED


class IdentityMismatch(CheckpointError):
    exit_code = exitcodes.IDENTITY_MISMATCH

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(
            f"the race file differs from the saved run {run_id} (agents, briefs, budget "
            f"or version changed): use a new run_id"
        )


class CorruptCheckpoint(CheckpointError):
    exit_code = exitcodes.CORRUPT_CHECKPOINT


class UnsealedCheckpoint(CorruptCheckpoint):
    """A checkpoint without a seal: nothing says the engine wrote it, so it is not acted on."""


class UnknownRun(CheckpointError):
    exit_code = exitcodes.UNKNOWN_RUN


def checkpoint_key(run_id: str) -> str:
    if not isinstance(run_id, str) or not run_id.strip():
        raise CheckpointError("a durable race needs a non-blank run_id")
    return f"{PREFIX}{hashlib.sha256(run_id.encode()).hexdigest()}.json"


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def race_identity(spec: RaceSpec) -> str:
    """What a saved run must still match to be resumed: a changed agent, brief, budget, provider,
    repository or version makes the saved attempts meaningless for this race file."""
    budget = spec.budget
    tokens = budget.tokens
    identity: dict[str, Any] = {
        "repository": real_path(spec.repository),
        "version": spec.durability.version,
        "provider": spec.sandbox.provider,
        "candidates": [
            {"key": c.key, "brief": c.brief, "agent": c.agent, "model": c.model} for c in spec.candidates
        ],
        "budget": {
            "attempts": budget.attempts,
            "cost_usd": budget.cost_usd,
            "tokens": {
                "input": tokens.input,
                "cached": tokens.cached,
                "cache_write": tokens.cache_write,
                "output": tokens.output,
            },
        },
        "mode": spec.mode,
    }
    # Only present in best mode, so first-mode identities do not depend on this field existing.
    if spec.select == "best":
        identity["select"] = "best"
    return hashlib.sha256(_canonical(identity)).hexdigest()


@dataclass(frozen=True)
class Saved:
    state: dict[str, Any]
    owner: Owner | None
    revision: str
    updated_at: float = 0.0  # when the object was last written


@dataclass(frozen=True)
class RunSummary:
    run_id: str | None  # None when the file cannot be read
    key: str
    revision: str
    owner: Owner | None
    # The race status when finished, else "owned" | "interrupted" | "released"; "corrupt" if unreadable,
    # "unsealed" when nothing vouches for it (see _decode).
    status: str
    updated_at: float
    problem: str | None = None
    race_id: str | None = None  # the race the run's latest call ran (its flight log, containers)


def _encode_state(run_id: str, state: dict[str, Any]) -> str:
    try:
        return json.dumps(state, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"the state of run {run_id} is not plain JSON: {error}") from None


# The seal is the envelope's last member, so what it covers is every byte before it, exactly.
_SEALED = re.compile(rb',"seal":"(' + seal.SEAL_PATTERN.encode() + rb')"\}\s*\Z')


def _envelope(owner: Owner | None, state_text: str, key: str) -> bytes:
    # Spliced rather than re-serialised: a heartbeat rewrites the owner without re-encoding the state.
    owner_text = "null" if owner is None else json.dumps(owner.to_json(), separators=(",", ":"))
    return sealed_envelope(key, owner_text, state_text)


def sealed_envelope(key: str, owner_text: str, state_text: str) -> bytes:
    """The bytes stored for a checkpoint at `key`: the envelope of the owner's and the state's JSON
    text, sealed (the one way an envelope is made, for the store and for tests that damage one)."""
    body = f'{{"format":{FORMAT},"owner":{owner_text},"state":{state_text}'.encode()
    return body + b',"seal":"' + seal.seal(seal.CHECKPOINT, key.encode(), body).encode() + b'"}'


def _decode(
    where: str, data: bytes, key: str, run_id: str | None = None
) -> tuple[Owner | None, dict[str, Any]]:
    named = f"run {run_id}: {where}" if run_id is not None else where

    def corrupt(reason: str) -> CorruptCheckpoint:
        return CorruptCheckpoint(f"{named}: {reason}; the file was left untouched")

    try:
        envelope = json.loads(data)
    except UnicodeDecodeError:
        raise corrupt("saved state is not UTF-8 text") from None
    except ValueError as error:
        raise corrupt(f"saved state is not valid JSON ({error})") from None
    if not isinstance(envelope, dict):
        raise corrupt("saved state is not a JSON object")
    if envelope.get("format") != FORMAT:
        raise corrupt(f"unsupported checkpoint format {envelope.get('format')!r} (expected {FORMAT})")
    state = envelope.get("state")
    if not isinstance(state, dict):
        raise corrupt("the envelope has no state object")
    raw_owner = envelope.get("owner")
    try:
        owner = None if raw_owner is None else Owner.from_json(raw_owner)
    except ValueError as error:
        raise corrupt(str(error)) from None
    # Before its rules: a forged state is refused as forged, whatever it says.
    sealed = _SEALED.search(data)
    if sealed is None or "seal" not in envelope:
        raise UnsealedCheckpoint(
            f"{named}: the checkpoint has no seal (written before checkpoints were sealed, or its "
            f"seal was cut off), so nothing vouches for it: it is not resumed, released or stopped; "
            f"start the race under a new run_id; the file was left untouched"
        )
    if not seal.verify(sealed.group(1).decode(), seal.CHECKPOINT, key.encode(), data[: sealed.start()]):
        raise corrupt(
            f"the checkpoint does not match its seal (changed outside outpost-tui, or sealed under "
            f"another key than {seal.key_path()})"
        )
    try:
        check_state(state, key=key)
    except InvalidState as error:
        raise corrupt(f"invalid saved state: {error}") from None
    return owner, state


def read_saved(transport: Transport, key: str, run_id: str | None = None) -> Saved | None:
    try:
        stored = transport.read(key)
    except CorruptObject as error:
        raise CorruptCheckpoint(str(error)) from None
    if stored is None:
        return None
    owner, state = _decode(transport.describe(key), stored.data, key, run_id)
    return Saved(state, owner, stored.revision, stored.modified_at)


def read_run(transport: Transport, run_id: str) -> Saved:
    """The recovery "inspect" step: the saved run, or UnknownRun."""
    saved = read_saved(transport, checkpoint_key(run_id), run_id)
    if saved is None:
        raise UnknownRun(
            f"no saved run {run_id} ({transport.describe(checkpoint_key(run_id))} does not exist)"
        )
    return saved


def release_run(transport: Transport, run_id: str, revision: str) -> str:
    """The recovery "release" step: give up the old owner's claim; returns the new revision.

    Refused when the saved run changed since `revision` was read. Stops and deletes nothing: the old
    coordinator must already be stopped, and sandboxes are reconciled on replay.
    """
    key = checkpoint_key(run_id)
    saved = read_run(transport, run_id)
    if saved.revision != revision:
        raise RevisionChanged(
            f"run {run_id} changed since it was read (revision {revision}, now "
            f"{saved.revision}): inspect it again before releasing"
        )
    state_text = _encode_state(run_id, saved.state)
    try:
        return transport.write(key, _envelope(None, state_text, key), if_revision=revision)
    except TransportConflict:
        raise RevisionChanged(f"run {run_id} changed while it was being released: inspect it again") from None


def list_runs(transport: Transport) -> list[RunSummary]:
    """Every saved run, most recently written first; unreadable ones are listed as "corrupt"."""
    runs: list[RunSummary] = []
    for entry in transport.list(PREFIX):
        if entry.problem is not None:
            runs.append(
                RunSummary(None, entry.key, entry.revision, None, "corrupt", entry.modified_at, entry.problem)
            )
            continue
        try:
            saved = read_saved(transport, entry.key)
        except CorruptCheckpoint as error:
            status = "unsealed" if isinstance(error, UnsealedCheckpoint) else "corrupt"
            runs.append(
                RunSummary(None, entry.key, entry.revision, None, status, entry.modified_at, str(error))
            )
            continue
        if saved is None:
            continue  # removed while listing
        run_id, race_id = saved.state.get("run_id"), saved.state.get("id")
        runs.append(
            RunSummary(
                run_id if isinstance(run_id, str) else None,
                entry.key,
                saved.revision,
                saved.owner,
                _status(saved),
                saved.updated_at,
                race_id=race_id if isinstance(race_id, str) else None,
            )
        )
    runs.sort(key=lambda run: run.updated_at, reverse=True)
    return runs


def _status(saved: Saved) -> str:
    return run_status(saved.state, saved.owner is not None)


class CheckpointStore:
    """One coordinator's session on one durable run: claim, save, heartbeat, release.

    Methods are blocking (call them from a worker thread) and thread-safe: writes are serialised, each
    conditional on the revision the previous one returned. `save` encodes the state before it returns,
    so the caller may mutate its dict afterwards, but not during the call.
    """

    def __init__(self, transport: Transport, run_id: str, repository: str | Path | None = None) -> None:
        self.transport = transport
        self.run_id = run_id
        self.repository = repository  # named in messages, so their commands work from anywhere
        self.key = checkpoint_key(run_id)
        self.owner: Owner | None = None
        self.revision: str | None = None
        self.resumed = False  # claim found a saved state (a replay) rather than starting fresh
        self._identity: str | None = None
        self._state_text: str | None = None
        self._lock = threading.Lock()

    @property
    def location(self) -> str:
        return self.transport.describe(self.key)

    def read(self) -> Saved | None:
        return read_saved(self.transport, self.key, self.run_id)

    def _stamp(self, state: dict[str, Any]) -> dict[str, Any]:
        # identity and run_id are what resume checks and `outpost-tui runs` shows: the store keeps them.
        return {**state, "identity": self._identity, "run_id": self.run_id}

    def claim(self, initial_state: dict[str, Any], *, identity: str) -> dict[str, Any]:
        """Take ownership; returns the state to run from (initial_state stamped, or the saved one)."""
        with self._lock:
            if self.owner is not None:
                raise RuntimeError(f"run {self.run_id} is already claimed by this store")
            saved = self.read()
            if saved is not None:
                if saved.owner is not None:
                    raise AlreadyOwned(self.run_id, saved.owner, repository=self.repository)
                if saved.state.get("identity") != identity:
                    raise IdentityMismatch(self.run_id)
            self._identity = identity
            state = self._stamp(initial_state if saved is None else saved.state)
            state_text = _encode_state(self.run_id, state)
            owner = Owner.current()
            try:
                revision = self.transport.write(
                    self.key,
                    _envelope(owner, state_text, self.key),
                    if_revision=None if saved is None else saved.revision,
                )
            except TransportConflict:
                raise self._lost_claim() from None
            self.owner, self.revision, self._state_text = owner, revision, state_text
            self.resumed = saved is not None
            return state

    def _lost_claim(self) -> CheckpointError:
        try:
            current = self.read()
        except CheckpointError as error:
            return error
        if current is not None and current.owner is not None:
            return AlreadyOwned(self.run_id, current.owner, repository=self.repository)
        return RevisionChanged(f"run {self.run_id} changed while it was being claimed: try again")

    def _write(self, owner: Owner | None, state_text: str) -> None:
        if self.owner is None:
            raise RuntimeError(f"run {self.run_id} is not claimed by this store")
        try:
            self.revision = self.transport.write(
                self.key, _envelope(owner, state_text, self.key), if_revision=self.revision
            )
        except TransportConflict:
            raise RevisionChanged(
                f"run {self.run_id} was changed by another process since this coordinator last saved it "
                f"({self.location}): it was released or taken over, so this coordinator must stop"
            ) from None
        self._state_text = state_text
        self.owner = owner

    def _beating(self) -> Owner:
        if self.owner is None:
            raise RuntimeError(f"run {self.run_id} is not claimed by this store")
        return dataclasses.replace(self.owner, heartbeat_at=time.time())

    def save(self, state: dict[str, Any]) -> None:
        """Write `state`; every write also refreshes the heartbeat, so a coordinator busy saving usage
        never looks dead to `recover`."""
        with self._lock:
            state_text = _encode_state(self.run_id, self._stamp(state))
            self._write(self._beating(), state_text)

    def heartbeat(self) -> None:
        """Re-save the last state with a fresh heartbeat, so `recover` can show the owner is alive."""
        with self._lock:
            if self._state_text is None:
                raise RuntimeError(f"run {self.run_id} is not claimed by this store")
            self._write(self._beating(), self._state_text)

    def release(self) -> None:
        """Give up ownership (owner null); later saves through this store are refused."""
        with self._lock:
            if self._state_text is None:
                raise RuntimeError(f"run {self.run_id} is not claimed by this store")
            self._write(None, self._state_text)
