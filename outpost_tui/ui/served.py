"""The app as textual-serve runs it for one browser tab (`outpost-tui serve`): no terminal on either
end, the web driver in its place (textual-serve sets it in the environment)."""

from __future__ import annotations

import sys

from . import launch


def main(argv: list[str]) -> int:
    start = "--start" in argv
    words = [word for word in argv if word != "--start"]
    return launch(words[0] if words else None, start=start)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
