"""The provider a race's `[sandbox]` names: kept out of the contract module, which every provider
imports."""

from __future__ import annotations

from ..core.spec import SandboxSpec
from .base import SandboxProvider
from .container import ContainerProvider
from .local import LocalProvider


def provider_for(spec: SandboxSpec) -> SandboxProvider:
    if spec.provider == "local":
        return LocalProvider(spec.isolation, spec.writable)
    return ContainerProvider(spec)
