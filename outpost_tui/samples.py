"""The sample races shipped with outpost-tui, and how to put one somewhere it can run.

A sample is a directory of `sample-races/` holding a race.toml, the demo scripts it refers to and a
`sample.toml` describing it (`project`, `description`). Materialising copies the race next to a
fresh git repository made from `sample-races/projects/<project>/`, so a race never touches the
checkout the samples come from.
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .engine.errors import OutpostError

PROJECTS = "projects"
METADATA = "sample.toml"
RACE_FILE = "race.toml"
IDENTITY = ("-c", "user.name=outpost-tui sample", "-c", "user.email=sample@outpost.invalid")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", ".git", ".outpost", METADATA)


class SampleError(OutpostError):
    """A sample cannot be listed or materialised; the message is one line."""


@dataclass(frozen=True)
class Sample:
    name: str
    description: str
    project: str
    directory: Path


def samples_root() -> Path:
    # A checkout (or an editable install) has them beside the package; a wheel installs them
    # under <prefix>/share/outpost-tui/.
    candidates = [
        Path(__file__).resolve().parent.parent / "sample-races",
        Path(sys.prefix) / "share" / "outpost-tui" / "sample-races",
    ]
    for root in candidates:
        if root.is_dir():
            return root
    raise SampleError("sample races not found in " + " or ".join(map(str, candidates)))


def _describe(directory: Path) -> Sample:
    metadata_path = directory / METADATA
    try:
        metadata = tomllib.loads(metadata_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        metadata = {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise SampleError(f"{metadata_path}: unreadable sample description: {error}") from None
    project = metadata.get("project", "calc")
    description = metadata.get("description", "")
    if not isinstance(project, str) or not isinstance(description, str):
        raise SampleError(f"{metadata_path}: 'project' and 'description' must be strings")
    return Sample(directory.name, description, project, directory)


def samples() -> list[Sample]:
    root = samples_root()
    return [
        _describe(entry)
        for entry in sorted(root.iterdir())
        if entry.name != PROJECTS and (entry / RACE_FILE).is_file()
    ]


def list_samples() -> list[str]:
    return [sample.name for sample in samples()]


def find_sample(name: str) -> Sample:
    known = samples()
    for sample in known:
        if sample.name == name:
            return sample
    names = ", ".join(sample.name for sample in known) or "none"
    raise SampleError(f"unknown sample {name!r} (available: {names})")


def materialise(name: str, target_dir: str | os.PathLike[str]) -> Path:
    """Writes sample `name` into target_dir (absent or empty) and returns its race file's path."""
    sample = find_sample(name)
    project = samples_root() / PROJECTS / sample.project
    if not project.is_dir():
        raise SampleError(
            f"sample {name!r} needs project {sample.project!r}, which is missing from {project.parent}"
        )
    target = Path(target_dir).expanduser().absolute()
    created = not target.exists()
    try:
        if not created:
            if not target.is_dir():
                raise SampleError(f"{target} exists and is not a directory")
            if any(target.iterdir()):
                raise SampleError(f"{target} is not empty; choose a new or empty directory")
    except OSError as error:
        raise SampleError(f"cannot write the sample to {target}: {_reason(error, target)}") from None
    try:
        shutil.copytree(sample.directory, target, ignore=SKIPPED, dirs_exist_ok=True)
        shutil.copytree(project, target / "project", ignore=SKIPPED)
        _init_repository(target / "project", f"{sample.project}: sample project for outpost-tui")
    except OSError as error:
        _remove_written(target, created)
        raise SampleError(f"cannot write the sample to {target}: {_reason(error, target)}") from None
    except BaseException:
        _remove_written(target, created)
        raise
    return target / RACE_FILE


def _remove_written(target: Path, created: bool) -> None:
    # Only what we wrote is removed: the directory was absent or empty before.
    if created:
        shutil.rmtree(target, ignore_errors=True)
        return
    try:
        entries = list(target.iterdir())
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        except OSError:
            continue  # best effort: the error being reported matters more


def _reason(error: OSError, target: Path) -> str:
    """The OS's reason, naming the file it concerns when that is not the target itself."""
    if isinstance(error, shutil.Error):
        # copytree gathers per-file failures: (source, destination, why) for each
        failures = error.args[0] if error.args and isinstance(error.args[0], list) else []
        if failures:
            _, destination, why = failures[0]
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            return f"{destination}: {why}{more}"
    reason = error.strerror or str(error)
    if error.filename and Path(os.fsdecode(error.filename)) != target:
        return f"{os.fsdecode(error.filename)}: {reason}"
    return reason


def _init_repository(directory: Path, message: str) -> None:
    # The engine's git runner: a hook's GIT_DIR would aim these at some other repository.
    from .engine import git

    steps = (
        ("init", ("init", "-q", "-b", "main")),
        ("add", ("add", "-A")),
        ("commit", (*IDENTITY, "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", message)),
    )
    for name, args in steps:
        try:
            status, out, err = git.run(directory, *args)
        except git.GitError as error:
            raise SampleError(str(error)) from None  # git missing: it names the repository it was for
        if status != 0:
            lines = (err or out).strip().splitlines()
            detail = lines[-1] if lines else f"exit {status}"
            raise SampleError(f"git {name} failed in {directory}: {detail}")
