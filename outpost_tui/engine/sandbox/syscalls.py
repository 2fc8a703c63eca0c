"""The system calls a fenced command is refused: the kernel's keyrings (add_key, keyctl,
request_key), as Docker's default profile refuses them.

Keyrings are not namespaced, and no mount hides them: without this filter a candidate reads the
keys its user keeps there (a Kerberos ticket cache, a token a tool stored) and adds keys that
outlive its race. bubblewrap loads the filter (a seccomp program, built here with libseccomp) just
before it starts the command; a refused call fails with EPERM, as on a kernel without keyrings.
The program is built once per process, for the machine's architecture and the 32-bit ones it also
runs, so a call made the 32-bit way is refused as well.
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import tempfile
from functools import cache

REFUSED = ("add_key", "keyctl", "request_key")
# The 32-bit ABIs a 64-bit kernel also takes calls through; any other is killed by libseccomp's
# default for a foreign architecture.
_ALSO = {"x86_64": ("X86", "X32"), "aarch64": ("ARM",)}


@cache
def _built() -> tuple[bytes | None, str]:
    """(the seccomp program, "") or (None, why it cannot be built here)."""
    try:
        # imported here: loading it looks for libseccomp (ldconfig), which no other command needs
        import pyseccomp as seccomp  # type: ignore[import-untyped]
    except (ImportError, OSError, AttributeError, RuntimeError) as error:  # RuntimeError: not installed
        return None, f"libseccomp cannot be loaded: {error}"
    try:
        program = seccomp.SyscallFilter(seccomp.ALLOW)
        for arch in _ALSO.get(platform.machine(), ()):
            # one this libseccomp does not know stays out: its calls are then killed, not allowed
            with contextlib.suppress(OSError, AttributeError):
                program.add_arch(getattr(seccomp.Arch, arch))
        for name in REFUSED:
            program.add_rule(seccomp.ERRNO(errno.EPERM), name)
        with tempfile.TemporaryFile() as handle:
            program.export_bpf(handle)  # written to its fd, not through the file's buffer
            handle.seek(0)
            return handle.read(), ""
    except (OSError, ValueError, RuntimeError) as error:
        return None, f"libseccomp cannot build the filter: {error}"


def unavailable() -> str:
    """Why fenced commands run without the filter ("" when they run with it)."""
    return _built()[1]


def program_fd() -> int | None:
    """A file holding the program at offset 0, for one command (bubblewrap reads it from the
    offset, so concurrent commands never share one); the caller closes it. None: no filter."""
    program = _built()[0]
    if program is None:
        return None
    fd = os.memfd_create("outpost-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
