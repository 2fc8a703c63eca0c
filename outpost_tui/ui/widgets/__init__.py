"""Widgets of the app."""
