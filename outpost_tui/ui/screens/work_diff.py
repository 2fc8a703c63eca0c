"""A patch read file by file: a file list beside the diff, syntax-coloured, each file foldable.

Used for a candidate's whole work against its race's baseline (committed, uncommitted and untracked)
and for the comparison of two candidates. The patch text comes from the engine; this screen only
splits it into files and renders them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from ..widgets.header import OutpostHeader

# A patch view is for reading: a file past this many lines shows its start and says how much is cut.
MAX_FILE_LINES = 4000
ADDED = "on #0f3d1f"
REMOVED = "on #4a1418"


@dataclass
class FilePatch:
    path: str
    header: list[str] = field(default_factory=list)  # diff --git, index, ---, +++ lines
    body: list[str] = field(default_factory=list)  # hunks
    added: int = 0
    removed: int = 0

    @property
    def binary(self) -> bool:
        return any(line.startswith(("Binary files", "GIT binary patch")) for line in self.header + self.body)


def split_patch(text: str) -> list[FilePatch]:
    """The files of a `git diff` patch, in order."""
    files: list[FilePatch] = []
    for line in text.splitlines():
        if line.startswith("diff --git "):
            files.append(FilePatch(_path_of(line), [line]))
        elif not files:
            continue
        elif not files[-1].body and not line.startswith("@@"):
            files[-1].header.append(line)
            if line.startswith("+++ b/"):
                files[-1].path = line.removeprefix("+++ b/")
        else:
            files[-1].body.append(line)
            if line.startswith("+"):
                files[-1].added += 1
            elif line.startswith("-"):
                files[-1].removed += 1
    return files


def _path_of(line: str) -> str:
    # "diff --git a/x b/x": the b side, which also names a file added or renamed
    rest = line.removeprefix("diff --git ")
    half = rest.find(" b/")
    return rest[half + 3 :] if half >= 0 else rest


def render_body(patch: FilePatch, theme: str = "monokai") -> Text:
    """The file's hunks: code coloured for its language, added and removed lines on tinted ground."""
    body = patch.body[:MAX_FILE_LINES]
    code = "\n".join(line[1:] if line[:1] in "+- " else "" for line in body)
    lexer = Syntax.guess_lexer(patch.path, code=code)
    highlighted = Syntax(code, lexer, theme=theme, background_color="default").highlight(code).split("\n")
    out = Text()
    for index, line in enumerate(body):
        if line.startswith("@@"):
            out.append(line, style="bold cyan")
        elif line.startswith("\\"):
            out.append(line, style="dim")
        else:
            marker = line[:1]
            ground = ADDED if marker == "+" else REMOVED if marker == "-" else ""
            piece = Text(
                marker or " ", style=f"bold {'green' if marker == '+' else 'red' if marker == '-' else ''}"
            )
            code_line = highlighted[index] if index < len(highlighted) else Text(line[1:])
            piece.append_text(code_line)
            if ground:
                piece.stylize(ground)
            out.append_text(piece)
        out.append("\n")
    if len(patch.body) > MAX_FILE_LINES:
        out.append(f"… {len(patch.body) - MAX_FILE_LINES} more lines not shown\n", style="bold")
    if not body:
        out.append("(binary file)" if patch.binary else "(mode or name change only)", style="dim")
    out.rstrip()
    return out


class FileHeader(Static):
    """A file's name above its patch (styled in work_diff.tcss)."""


class WorkDiffScreen(Screen):
    """A patch, file by file: n/p move between files, z folds the current file, Z folds them all."""

    BINDINGS = [
        Binding("n,j", "next_file", "Next file", id="diff.next_file"),
        Binding("p,k", "previous_file", "Prev file", id="diff.previous_file"),
        Binding("z", "fold", "Fold", id="diff.fold"),
        Binding("Z", "fold_all", "Fold all", id="diff.fold_all"),
        Binding("escape,q", "dismiss", "Back", id="diff.back"),
    ]
    CSS_PATH = "work_diff.tcss"

    def __init__(self, title: str, patch: str, summary: str = "") -> None:
        super().__init__()
        self.heading = title
        self.summary = summary
        self.files = split_patch(patch)
        self.current = 0

    def compose(self) -> ComposeResult:
        yield OutpostHeader()
        yield Static(self.heading, id="diff-title", markup=False)
        if self.summary:
            yield Static(self.summary, id="diff-summary", markup=False)
        with Horizontal():
            yield OptionList(
                *[Option(self._label(f), id=str(i)) for i, f in enumerate(self.files)], id="files"
            )
            with VerticalScroll(id="patch"):
                if not self.files:
                    yield Static("(no changes)", markup=False)
                for index, patch in enumerate(self.files):
                    yield FileHeader(self._heading(patch, folded=False), id=f"file-{index}", markup=False)
                    yield Static(render_body(patch), id=f"body-{index}", classes="body", markup=False)
        yield Footer()

    @staticmethod
    def _label(patch: FilePatch) -> Text:
        label = Text(patch.path)
        label.append(f" +{patch.added}", style="green")
        label.append(f" -{patch.removed}", style="red")
        return label

    @staticmethod
    def _heading(patch: FilePatch, folded: bool) -> str:
        return f"{'▸' if folded else '▾'} {patch.path}  +{patch.added} -{patch.removed}"

    def on_mount(self) -> None:
        if self.files:
            self.query_one("#files", OptionList).highlighted = 0

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._go(int(event.option.id or 0), from_list=True)

    def _go(self, index: int, from_list: bool = False) -> None:
        if not self.files:
            return
        self.current = max(0, min(index, len(self.files) - 1))
        if not from_list:
            self.query_one("#files", OptionList).highlighted = self.current
        self.query_one("#patch", VerticalScroll).scroll_to_widget(
            self.query_one(f"#file-{self.current}"), top=True, animate=False
        )

    def action_next_file(self) -> None:
        self._go(self.current + 1)

    def action_previous_file(self) -> None:
        self._go(self.current - 1)

    def _fold(self, index: int, folded: bool) -> None:
        body = self.query_one(f"#body-{index}", Static)
        body.set_class(folded, "folded")
        self.query_one(f"#file-{index}", FileHeader).update(self._heading(self.files[index], folded))

    def is_folded(self, index: int) -> bool:
        return self.query_one(f"#body-{index}", Static).has_class("folded")

    def action_fold(self) -> None:
        if self.files:
            self._fold(self.current, not self.is_folded(self.current))
            self._go(self.current)

    def action_fold_all(self) -> None:
        if not self.files:
            return
        fold = not all(self.is_folded(i) for i in range(len(self.files)))
        for index in range(len(self.files)):
            self._fold(index, fold)
        self._go(self.current)
