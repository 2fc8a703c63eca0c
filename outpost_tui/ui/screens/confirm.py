"""A yes/no question: `y` or `enter` accepts, `n` or `escape` refuses."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: auto; max-width: 80; height: auto; padding: 1 2;
        border: thick $warning; background: $panel;
    }
    /* auto width up to the box's: a long question wraps instead of losing its end */
    ConfirmScreen .question { width: auto; max-width: 76; }
    ConfirmScreen .keys { color: $text-muted; margin-top: 1; }
    """
    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, classes="question", markup=False)
            yield Static("[b]y[/b]/enter yes   [b]n[/b]/escape no", classes="keys")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
