"""outpost-tui: race coding agents on one task and keep the one whose work passes your tests."""

__version__ = "0.1.0"
