"""Where a candidate's agent and validation run: local process groups or containers."""

from .base import Completed, EngineGone, Sandbox, SandboxContext, SandboxError, SandboxProvider

__all__ = ["Completed", "EngineGone", "Sandbox", "SandboxContext", "SandboxError", "SandboxProvider"]
