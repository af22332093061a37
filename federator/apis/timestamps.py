"""Timestamps as Kubernetes writes and reads them: the one place federator
formats or parses a wire time (apimachinery's metav1.Time beside the API types).

Formats:
- `format_time`: metav1.Time, RFC 3339 in UTC with whole seconds
  (`2024-05-01T12:00:00Z`): creationTimestamp, conditions, status fields;
- `format_micro_time`: metav1.MicroTime, six fraction digits
  (`2024-05-01T12:00:00.123456Z`): Events' eventTime, Lease renewTime;
- `format_nano_time`: Go's time.RFC3339Nano with the trailing zeros of the
  fraction dropped, as a kubelet stamps log lines.

Parsing: `parse_time` is the one tolerant parser. It reads what Go's
time.Parse(time.RFC3339) reads (upper-case `T` and `Z`, or a `±hh:mm`
offset, any number of fraction digits, kept to the microsecond) and returns
an aware UTC datetime, or None for anything else: None, numbers, bytes, a
string too long to be a time, a date alone, a missing zone, second 60, an
hour or offset out of range, digits other than ASCII. `parse_epoch` gives
the same as seconds since the epoch; `parse_micro_time` accepts only
MicroTime's exact layout; `require_time` raises a ValueError with a message
for validators.

Bottom layer: standard library only, no I/O, no state. It never echoes
hostile input (a caller that reports a bad value quotes it itself).
"""

from __future__ import annotations

import datetime as dt
import functools
import re

__all__ = [
    "MAX_TIME_LENGTH",
    "TIME_EXAMPLE",
    "format_micro_time",
    "format_nano_time",
    "format_time",
    "parse_epoch",
    "parse_micro_time",
    "parse_time",
    "require_time",
]

#: longer strings are not times (the longest with nine fraction digits and an offset is 35 characters)
MAX_TIME_LENGTH = 64
TIME_EXAMPLE = "2024-05-01T12:00:00Z"
_NS = 1_000_000_000

# [0-9], not \d: \d also matches other scripts' digits, which int() would then read
_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
                   r"(?:\.([0-9]+))?(Z|[+-][0-9]{2}:[0-9]{2})")


def _utc(when: dt.datetime | float) -> dt.datetime:
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise ValueError("a timestamp needs an aware datetime (a naive one has no zone to convert from)")
        return when.astimezone(dt.UTC)
    return dt.datetime.fromtimestamp(when, dt.UTC)


def _seconds_text(moment: dt.datetime) -> str:
    # not strftime("%Y"): glibc writes years before 1000 without their leading zeros
    return (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
            f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}")


def format_time(when: dt.datetime | float) -> str:
    """metav1.Time: RFC 3339 in UTC, whole seconds. `when` is an aware datetime
    or seconds since the epoch; a naive datetime is a ValueError."""
    return _seconds_text(_utc(when)) + "Z"


def format_micro_time(when: dt.datetime | float) -> str:
    """metav1.MicroTime: RFC 3339 in UTC with exactly six fraction digits."""
    moment = _utc(when)
    return f"{_seconds_text(moment)}.{moment.microsecond:06d}Z"


def format_nano_time(ns: int) -> str:
    """Go's time.RFC3339Nano of `ns` nanoseconds since the epoch (trailing zeros dropped)."""
    seconds, fraction = divmod(ns, _NS)
    text = _seconds_text(dt.datetime.fromtimestamp(seconds, dt.UTC))
    digits = f"{fraction:09d}".rstrip("0")
    return f"{text}.{digits}Z" if digits else f"{text}Z"


def _parse(value: object, *, micro: bool) -> dt.datetime | None:
    if not isinstance(value, str) or len(value) > MAX_TIME_LENGTH:
        return None
    return _parse_text(value, micro)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str, micro: bool) -> dt.datetime | None:
    """`_parse` of a string of at most MAX_TIME_LENGTH characters, remembered: the controllers read the same
    history times (a job's Placed entry, ...) on every tick; the result is immutable."""
    m = _TIME.fullmatch(value)  # not `$`: it would accept a trailing newline
    if m is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    if micro and (fraction is None or len(fraction) != 6):
        return None
    try:
        if zone == "Z":
            tz = dt.UTC
        else:
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:  # Go's limits; Python would take 23:59 and less too
                return None
            offset = dt.timedelta(hours=hours, minutes=minutes)
            tz = dt.timezone(offset if zone[0] == "+" else -offset)
        micros = int((fraction or "0")[:6].ljust(6, "0"))  # datetime keeps microseconds only
        moment = dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micros,
                             tzinfo=tz)
        return moment.astimezone(dt.UTC)
    except (ValueError, OverflowError):  # a field out of range (month 13, second 60), or year 1 minus an offset
        return None


def parse_time(value: object) -> dt.datetime | None:
    """An RFC 3339 time as an aware UTC datetime; None when `value` is anything else."""
    return _parse(value, micro=False)


def parse_epoch(value: object) -> float | None:
    """An RFC 3339 time as seconds since the epoch; None when `value` is anything else."""
    moment = _parse(value, micro=False)
    return None if moment is None else moment.timestamp()


def parse_micro_time(value: object) -> dt.datetime | None:
    """A MicroTime as kube's decoder reads it (RFC3339Micro: exactly six fraction digits), else None."""
    return _parse(value, micro=True)


def require_time(value: object) -> dt.datetime:
    """`parse_time` for validators: a ValueError that says what is expected (never the value)."""
    moment = _parse(value, micro=False)
    if moment is None:
        raise ValueError(f"must be an RFC 3339 timestamp such as \"{TIME_EXAMPLE}\"")
    return moment
