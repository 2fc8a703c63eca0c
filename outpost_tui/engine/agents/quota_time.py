"""When a quota resets, from the many ways agent CLIs write it, as an absolute UTC time.

Agents print reset times as epoch seconds, local clock times with an optional IANA zone in
parentheses ("4pm (America/Recife)", "Feb 16, 11am (Europe/Berlin)"), clock times in the child's
local zone ("3:09 PM": agents are launched with TZ=UTC), full dates ("Aug 20th, 2026 11:50 AM",
"2026-04-01 at 00:00 UTC") or durations ("in 2 hours 5 minutes", "after 2h52m39s"). A time
without a date means its next occurrence after `now`; a date without a year means its next
occurrence too.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1
    )
}

# Phrases that introduce the reset time in a longer message; the time is what follows.
_LEAD_INS = re.compile(
    r"(?:\bresets?(?:\s+(?:at|on|after|in))?|\btry again (?:at|in)|\bregain access on"
    r"|\bavailable again (?:at|in))"
    r"\s+(?P<when>.+)$",
    re.IGNORECASE,
)
# File paths and URLs carry dates and numbers that are not reset times ("Full report available at:
# /tmp/gemini-client-error-Turn.run-2026-12-01T14-09-48-435Z.json" once read as midnight).
_PATH_OR_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+|(?<![\w(])(?:~|\.{1,2})?/[^\s()]+", re.IGNORECASE)
_EPOCH_AFTER_BAR = re.compile(r"\|\s*(\d{9,11})\s*$")

_EPOCH = re.compile(r"^\s*(\d{9,11})(?:\.\d+)?\s*$")
_ISO = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})"
    r"(?:(?:\s+at\s+|T|\s+)(?P<h>\d{1,2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:\.\d+)?)?)?"
    r"\s*(?P<zone>Z|UTC|GMT|[+-]\d{2}:?\d{2}|\(?[A-Za-z_]+(?:/[A-Za-z0-9_+-]+)+\)?)?",
    re.IGNORECASE,
)
_DURATION_PART = re.compile(
    r"(\d+(?:\.\d+)?)\s*(d(?:ays?)?|h(?:ours?|rs?)?|m(?:in(?:ute)?s?)?|s(?:ec(?:ond)?s?)?)(?![a-z])",
    re.IGNORECASE,
)
_DURATION = re.compile(
    r"^\s*(?:in\s+)?~?\s*(?:\d+(?:\.\d+)?\s*[a-z]+[\s,]*(?:and\s+)?)+\.?\s*$",
    re.IGNORECASE,
)
_DATE = re.compile(
    r"(?P<month>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+"
    r"(?P<day>\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(?P<year>\d{4}))?",
    re.IGNORECASE,
)
_CLOCK = re.compile(
    r"(?<![\d:])(?P<h>\d{1,2})(?::(?P<mi>\d{2})(?::(?P<s>\d{2}))?)?\s*(?P<ampm>[ap])\.?\s?m\b\.?"
    r"|(?<![\d:])(?P<h24>\d{1,2}):(?P<mi24>\d{2})(?::(?P<s24>\d{2}))?(?![\d:])",
    re.IGNORECASE,
)
_ZONE = re.compile(r"\(([^)]+)\)|\b(UTC|GMT|Z)\b")


def iso_utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_epoch(seconds: float) -> str | None:
    try:
        return iso_utc(datetime.fromtimestamp(float(seconds), UTC))
    except (OverflowError, OSError, ValueError):
        return None


def parse_reset(text: str, now: datetime | None = None, default_zone: str = "UTC") -> str | None:
    """The reset time in `text` (a whole message or just the time) as ISO-8601 UTC, or None."""
    if not text:
        return None
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    text = " ".join(_PATH_OR_URL.sub(" ", text).split())
    bar = _EPOCH_AFTER_BAR.search(text)
    if bar:
        return from_epoch(int(bar.group(1)))
    lead_in = _LEAD_INS.search(text)
    fragment = lead_in.group("when") if lead_in else text
    return parse_when(fragment.rstrip(" ."), now, default_zone)


def parse_when(fragment: str, now: datetime, default_zone: str = "UTC") -> str | None:
    """A time expression on its own ("4pm (Europe/Berlin)", "in 90 min", "1767243600")."""
    epoch = _EPOCH.match(fragment)
    if epoch:
        return from_epoch(int(epoch.group(1)))
    if _DURATION.match(fragment) and not _CLOCK.search(fragment):
        return _after_duration(fragment, now)
    iso = _ISO.search(fragment)
    if iso:
        return _from_iso(iso, now, default_zone)
    return _from_clock(fragment, now, default_zone)


def _after_duration(fragment: str, now: datetime) -> str | None:
    seconds = 0.0
    for amount, unit in _DURATION_PART.findall(fragment):
        scale = {"d": 86400, "h": 3600, "m": 60, "s": 1}[unit[0].lower()]
        seconds += float(amount) * scale
    if seconds <= 0:
        return None
    return iso_utc(now + timedelta(seconds=seconds))


def _zone(name: str | None, default_zone: str) -> ZoneInfo | timezone | None:
    name = (name or default_zone).strip().strip("()").strip()
    if name.upper() in ("UTC", "GMT", "Z"):
        return UTC
    offset = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", name)
    if offset:
        sign = 1 if offset.group(1) == "+" else -1
        return timezone(sign * timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3))))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None  # a wrong reset time is worse than none


def _from_iso(match: re.Match[str], now: datetime, default_zone: str) -> str | None:
    zone = _zone(match.group("zone"), default_zone)
    if zone is None:
        return None
    try:
        moment = datetime(
            int(match.group("y")),
            int(match.group("mo")),
            int(match.group("d")),
            int(match.group("h") or 0),
            int(match.group("mi") or 0),
            int(match.group("s") or 0),
            tzinfo=zone,
        )
    except ValueError:
        return None
    return iso_utc(moment)


def _from_clock(fragment: str, now: datetime, default_zone: str) -> str | None:
    clock = _CLOCK.search(fragment)
    if clock is None:
        return None
    zone_match = _ZONE.search(fragment[clock.end() :]) or _ZONE.search(fragment)
    zone_name = (zone_match.group(1) or zone_match.group(2)) if zone_match else None
    zone = _zone(zone_name, default_zone)
    if zone is None:
        return None
    if clock.group("h24") is not None:
        hour, minute, second = int(clock.group("h24")), int(clock.group("mi24")), int(clock.group("s24") or 0)
    else:
        hour, minute, second = int(clock.group("h")), int(clock.group("mi") or 0), int(clock.group("s") or 0)
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if clock.group("ampm").lower() == "p" else 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    local_now = now.astimezone(zone)
    date = _DATE.search(fragment)
    if date is None:
        candidate = _at(local_now.year, local_now.month, local_now.day, hour, minute, zone, second)
        if candidate is None:
            return None
        if candidate <= now:
            candidate = _at_next_day(candidate, zone)
        return iso_utc(candidate)
    month, day = _MONTHS[date.group("month")[:3].lower()], int(date.group("day"))
    if date.group("year"):
        candidate = _at(int(date.group("year")), month, day, hour, minute, zone, second)
        return iso_utc(candidate) if candidate else None
    for year in (local_now.year, local_now.year + 1, local_now.year + 4):  # + 4: Feb 29
        candidate = _at(year, month, day, hour, minute, zone, second)
        if candidate is not None and candidate > now:
            return iso_utc(candidate)
    return None


def _at(
    year: int, month: int, day: int, hour: int, minute: int, zone: tzinfo, second: int = 0
) -> datetime | None:
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except ValueError:
        return None


def _at_next_day(moment: datetime, zone: tzinfo) -> datetime:
    # Wall-clock arithmetic in the zone, so a DST change does not shift the hour.
    return (moment.replace(tzinfo=None) + timedelta(days=1)).replace(tzinfo=zone)


def has_seconds(text: str) -> bool:
    """Whether the clock time in `text` gives its seconds ("3:09:19 PM")."""
    clock = _CLOCK.search(text or "")
    return bool(clock and (clock.group("s") or clock.group("s24")))


def after_minute(reset_at: str) -> str:
    """The end of the minute `reset_at` names: for a time printed cut to the minute, the first
    moment that is surely not before the real reset."""
    moment = datetime.strptime(reset_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return iso_utc(moment.replace(second=0) + timedelta(minutes=1))
