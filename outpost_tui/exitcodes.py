"""Exit codes of the command line (documented in `outpost-tui --help`)."""

WINNER = 0
NO_WINNER = 1
BUILD_FAILED = 1  # image build: the engine could not build the image
REFUSED = 1  # worktrees: an archive, prune, removal or deletion was refused (nothing was lost)
BAD_INPUT = 2  # bad race file or arguments
# Recovery and durable-run errors, each distinct so scripts can tell them apart.
OWNED = 3  # the run is owned by a coordinator: stop it and recover
REVISION_CHANGED = 4  # the saved state changed since it was read
IDENTITY_MISMATCH = 5  # the race file differs from the saved run: use a new run id
CORRUPT_CHECKPOINT = 6  # the saved state is garbled or truncated (left untouched)
UNKNOWN_RUN = 7
STORAGE_UNWRITABLE = 8
MISSING_REQUIREMENT = 9  # doctor: something the race needs is missing
REPLAY_REQUIRED = 10  # an interrupted durable run must be replayed explicitly (--resume)
BUG = 70  # an error outpost-tui did not expect: one line, the traceback in the bug log
INTERRUPTED = 130  # Ctrl-C outside a race
# The shell's code for a process killed by SIGPIPE (128 + 13): what `cmd | head` scripts expect.
CLOSED_OUTPUT = 141
