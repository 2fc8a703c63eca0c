"""The cyclic garbage collector around what the app loads and builds to open, all of which lives as
long as the app: held off while the command line opens the app, and, once a stage has loaded it
(the app's first frame, the first race built), frozen out of the collector's full passes, which
otherwise walk all of it again and again while agents print (a pass held the loop 50-150 ms under a
flood).

Each stage freezes once a process: what is frozen is never collected, and an app or race opened
later (tests open many) is not for good."""

from __future__ import annotations

import gc

_frozen: set[str] = set()


def hold_off() -> None:
    """Until the app has painted its first frame (`app_painted` lets the collector go then, and
    the command line does if the app ends first). Loading Textual and building the first screen
    made about 200 collections, 45 ms of a 0.4 s start, over objects that nearly all live as long
    as the app; what little garbage they leave (about 3,500 objects) is frozen with the rest."""
    gc.disable()


def let_go() -> None:
    gc.enable()


def app_painted() -> None:
    _freeze_once("start")
    let_go()


def race_built() -> None:
    """The race machinery's modules, loaded with the first race built, are as long-lived as the
    app's own."""
    _freeze_once("race machinery")


def _freeze_once(stage: str) -> None:
    if stage not in _frozen:
        _frozen.add(stage)
        gc.freeze()
