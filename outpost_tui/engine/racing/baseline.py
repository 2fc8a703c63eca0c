"""The baseline's own validation, once per race, beside the candidates: only a strict gate waits
for it."""

from __future__ import annotations

import time

from .. import git
from ..core.events import BaselineValidated
from ..sandbox import SandboxContext, SandboxError
from ..verdict import BaselineOutcome, Checkout, grade_baseline
from ..verdict.validation import ValidationContext
from . import setup as setups
from .running import Running
from .state import _one_line


class BaselineValidation(Running):
    """The baseline's validation, run once beside the candidates."""

    async def _validate_baseline(self) -> None:
        """The baseline's own validation, once, in its own checkout and sandbox."""
        assert self._baseline_done is not None and self.repository is not None
        assert self.id is not None and self.baseline is not None and self._provider is not None, (
            "set when the race starts"
        )
        validate = self.spec.validate
        try:
            if validate.command is None or validate.gate != "strict":
                return  # nothing to run, or nothing would read it
            outcome = BaselineOutcome("cancelled", reason="cancelled before it finished")
            self.baseline_outcome = outcome
            started = time.monotonic()

            async def register(resource_id: str) -> None:
                self.baseline_resources.append(resource_id)
                await self._save()

            # attempt 0 names no candidate's attempt (they count from 1): its container's name
            # cannot be one of theirs
            env = {"TZ": "UTC", "OUTPOST_RACE_ID": self.id, "OUTPOST_ATTEMPT": "0", "OUTPOST_BASELINE": "1"}
            ports: list[int] = []
            reservation = None
            if self.spec.setup.ports:
                reservation, ports = await self._take_ports()
                env.update(setups.port_environment(ports))
            context = SandboxContext(
                repository=self.repository,
                directory=self.repository,
                git_common_dir=self._git_common_dir,
                race_id=self.id,
                key="baseline",
                attempt=0,
                register_resource=register,
                env=env,
            )
            checkout = Checkout(
                self.repository,
                f"baseline-{self.id}",
                self.baseline,
                self._provider,
                context,
                self.spec.cleanup_timeout,
                self._grading_setup("baseline", 0, ports),
                self._private,
            )

            def decided(outcome: BaselineOutcome) -> None:
                outcome.duration = round(time.monotonic() - started, 3)
                self.baseline_outcome = outcome
                self.bus.publish(BaselineValidated(**outcome.to_json()))
                assert self._baseline_done is not None
                self._baseline_done.set()

            try:
                async with checkout:
                    assert checkout.sandbox is not None, "an entered checkout has its sandbox"
                    check_context = ValidationContext(
                        key="baseline",
                        attempt=0,
                        directory=checkout.directory,
                        branch="",
                        baseline=self.baseline,
                        commits=[],
                        sandbox=checkout.sandbox,
                    )
                    # Its command and everything it started are gone once it returns: the gates
                    # waiting on it go on while its checkout and sandbox are removed.
                    decided(
                        await grade_baseline(
                            self.spec.validate, checkout, check_context, lambda stream, lines: None
                        )
                    )
            except (SandboxError, git.GitError, OSError) as error:
                if not self._baseline_done.is_set():
                    decided(BaselineOutcome("error", reason=_one_line(error)))
            finally:
                if reservation is not None:
                    reservation.release()
        finally:
            self._baseline_done.set()
