"""federator.apis.timestamps: the formats Kubernetes writes and the one tolerant parser."""

from __future__ import annotations

import datetime as dt

import pytest

from federator.apis.timestamps import (
    format_micro_time,
    format_nano_time,
    format_time,
    parse_epoch,
    parse_micro_time,
    parse_time,
    require_time,
)

UTC = dt.UTC
NOON = dt.datetime(2024, 5, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("2024-05-01T12:00:00Z", NOON),
    ("2024-05-01T12:00:00.5Z", NOON.replace(microsecond=500_000)),
    ("2024-05-01T12:00:00.123456Z", NOON.replace(microsecond=123_456)),
    # nanoseconds (and more, as Go reads them) are kept to the microsecond, not rounded
    ("2024-05-01T12:00:00.123456789Z", NOON.replace(microsecond=123_456)),
    ("2024-05-01T12:00:00.9999999999999Z", NOON.replace(microsecond=999_999)),
    ("2024-05-01T14:00:00.123456789+02:00", NOON.replace(microsecond=123_456)),
    ("2024-05-01T06:30:00-05:30", NOON),
    ("2024-05-01T12:00:00+00:00", NOON),
    ("2024-05-01T12:00:00-00:00", NOON),
    ("2024-05-01T23:59:59+23:59", dt.datetime(2024, 5, 1, 0, 0, 59, tzinfo=UTC)),
    ("2024-02-29T00:00:00Z", dt.datetime(2024, 2, 29, tzinfo=UTC)),
    ("1970-01-01T00:00:00Z", dt.datetime(1970, 1, 1, tzinfo=UTC)),
    ("0999-01-01T00:00:00Z", dt.datetime(999, 1, 1, tzinfo=UTC)),
    ("9999-12-31T23:59:59Z", dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
])
def test_parse_time_reads_rfc3339(text: str, expected: dt.datetime) -> None:
    parsed = parse_time(text)
    assert parsed == expected
    assert parsed is not None and parsed.utcoffset() == dt.timedelta(0)
    assert parse_epoch(text) == expected.timestamp()
    assert require_time(text) == expected


@pytest.mark.parametrize("value", [
    None, 0, 1714564800, 1714564800.0, True, b"2024-05-01T12:00:00Z", ["2024-05-01T12:00:00Z"],
    {"time": "2024-05-01T12:00:00Z"}, NOON,
    "", " ", "yesterday", "2024-05-01", "12:00:00Z",
    "2024-05-01 12:00:00Z",  # a space is not RFC 3339's T
    "2024-05-01t12:00:00Z", "2024-05-01T12:00:00z",  # Go's time.Parse takes upper case only
    "2024-05-01T12:00:00",  # no zone
    "2024-05-01T12:00:00+0200", "2024-05-01T12:00:00+02", "2024-05-01T12:00:00.Z", "2024-05-01T12:00Z",
    " 2024-05-01T12:00:00Z", "2024-05-01T12:00:00Z ", "2024-05-01T12:00:00Z\n",
    "2024-13-01T12:00:00Z", "2024-00-10T12:00:00Z", "2023-02-29T12:00:00Z", "2024-04-31T12:00:00Z",
    "2024-05-01T24:00:00Z", "2024-05-01T12:60:00Z",
    "2016-12-31T23:59:60Z",  # a leap second: Go's time.Parse refuses second 60 too
    "2016-12-31T23:59:60.5Z", "2024-05-01T12:00:61Z",
    "2024-05-01T12:00:00+24:00", "2024-05-01T12:00:00-99:00", "2024-05-01T12:00:00+01:60",
    "0000-01-01T00:00:00Z",  # year 0: no datetime holds it
    "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
    "9999-12-31T23:00:00-01:00",  # after year 9999 in UTC
    "+2024-05-01T12:00:00Z", "-2024-05-01T12:00:00Z", "20240-05-01T12:00:00Z",
    "２０２４-05-01T12:00:00Z",  # full-width digits: \d would match them
    "٢٠٢٤-05-01T12:00:00Z",  # Arabic-Indic digits
    "2024-05-01T12:00:00." + "1" * 100 + "Z",  # longer than any time
    "2024-05-01T12:00:00Z" * 1000, "9" * 1_000_000,
])
def test_parse_time_refuses_anything_else(value: object) -> None:
    assert parse_time(value) is None
    assert parse_epoch(value) is None
    assert parse_micro_time(value) is None
    with pytest.raises(ValueError, match="must be an RFC 3339 timestamp") as caught:
        require_time(value)
    assert "1111" not in str(caught.value)  # never echoes the input


@pytest.mark.parametrize(("text", "expected"), [
    ("2024-05-01T12:00:00.123456Z", NOON.replace(microsecond=123_456)),
    ("2024-05-01T14:00:00.000000+02:00", NOON),
    ("2024-05-01T12:00:00Z", None),  # MicroTime needs exactly six fraction digits
    ("2024-05-01T12:00:00.12345Z", None),
    ("2024-05-01T12:00:00.1234567Z", None),
    ("2024-05-01T12:00:00.123456", None),
    (None, None),
])
def test_parse_micro_time_is_the_exact_layout(text: object, expected: dt.datetime | None) -> None:
    assert parse_micro_time(text) == expected


@pytest.mark.parametrize(("when", "seconds", "micro"), [
    (NOON, "2024-05-01T12:00:00Z", "2024-05-01T12:00:00.000000Z"),
    (NOON.replace(microsecond=999_999), "2024-05-01T12:00:00Z", "2024-05-01T12:00:00.999999Z"),
    (dt.datetime(2024, 5, 1, 14, 0, 0, 42, tzinfo=dt.timezone(dt.timedelta(hours=2))),
     "2024-05-01T12:00:00Z", "2024-05-01T12:00:00.000042Z"),
    (NOON.timestamp(), "2024-05-01T12:00:00Z", "2024-05-01T12:00:00.000000Z"),
    (NOON.timestamp() + 0.25, "2024-05-01T12:00:00Z", "2024-05-01T12:00:00.250000Z"),
    (0, "1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000000Z"),
    (dt.datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC), "0999-01-02T03:04:05Z", "0999-01-02T03:04:05.000000Z"),
])
def test_format(when: dt.datetime | float, seconds: str, micro: str) -> None:
    assert format_time(when) == seconds
    assert format_micro_time(when) == micro
    assert parse_micro_time(micro) is not None
    assert parse_time(seconds) == (when if isinstance(when, dt.datetime) else dt.datetime.fromtimestamp(
        when, UTC)).astimezone(UTC).replace(microsecond=0)


def test_format_refuses_a_naive_datetime() -> None:
    for fmt in (format_time, format_micro_time):
        with pytest.raises(ValueError, match="aware"):
            fmt(dt.datetime(2024, 5, 1))


@pytest.mark.parametrize(("ns", "text"), [
    (0, "1970-01-01T00:00:00Z"),
    (int(NOON.timestamp()) * 1_000_000_000, "2024-05-01T12:00:00Z"),
    (int(NOON.timestamp()) * 1_000_000_000 + 500_000_000, "2024-05-01T12:00:00.5Z"),
    (int(NOON.timestamp()) * 1_000_000_000 + 1, "2024-05-01T12:00:00.000000001Z"),
    (int(NOON.timestamp()) * 1_000_000_000 + 123_456_780, "2024-05-01T12:00:00.12345678Z"),
])
def test_format_nano_time(ns: int, text: str) -> None:
    assert format_nano_time(ns) == text
    assert parse_time(text) == dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=ns // 1000)
