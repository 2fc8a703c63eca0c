"""The demo agent: a real program shipped in the package that plays a scripted session.

It speaks the command-agent protocol, so it is decoded exactly like any command agent; only the
launch differs (the program is `python -m outpost_tui.engine.agents.demo_program SCRIPT`).
"""

from __future__ import annotations

import sys

from ..core.spec import CandidateSpec
from .base import Launch, LaunchContext, brief_env
from .command import CommandAgent


class DemoAgent(CommandAgent):
    kind = "demo"
    options = ("script",)

    def launch(self, candidate: CandidateSpec, brief: str, context: LaunchContext) -> Launch:
        if candidate.script is None:
            raise ValueError(f"candidate {candidate.key!r}: agent 'demo' needs a script")
        argv = (sys.executable, "-m", "outpost_tui.engine.agents.demo_program", str(candidate.script))
        return Launch(argv=argv, env=brief_env(brief, context), stdin=brief.encode())
