"""Report periods: what --since / --until / --compare-with mean, and the dated file name.

A period is a half-open UTC interval ``[start, end)`` on requests' ``arrival_at``; either bound
may be open. Times are ISO dates or datetimes (UTC unless they carry an offset) or ``now``; a
``--since`` may also be a duration (``90m``, ``24h``, ``7d``, ``2w``) counted back from ``--until``
(or from the latest arrival in the warehouse when ``--until`` is not given).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

UTC = dt.UTC
# One duration syntax for every command: a number with a unit, or a bare number of seconds.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(us|µs|ms|s|min|m|h|d|w)?\s*$")
_UNITS = {
    "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "m": 60, "h": 3600, "d": 86400,
    "w": 7 * 86400, None: 1,
}  # fmt: skip


class PeriodError(ValueError):
    pass


@dataclass(frozen=True)
class Period:
    start: dt.datetime | None = None  # inclusive
    end: dt.datetime | None = None  # exclusive

    @property
    def bounded(self) -> bool:
        return self.start is not None and self.end is not None

    @property
    def length(self) -> dt.timedelta | None:
        return self.end - self.start if self.bounded else None  # type: ignore[operator]

    def label(self) -> str:
        """Human form: '2026-11-02 00:00 → 2026-11-03 00:00 UTC'."""
        a = _short(self.start) if self.start else "start of data"
        b = _short(self.end) if self.end else "end of data"
        return f"{a} → {b} UTC"

    def slug(self) -> str:
        """File-name form: '20261102T0000Z-20261103T0000Z'."""
        a = _stamp(self.start) if self.start else "begin"
        return f"{a}-{_stamp(self.end) if self.end else 'end'}"

    def to_json(self) -> dict[str, str | None]:
        return {
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
        }


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y%m%dT%H%M%SZ" if t.second or t.microsecond else "%Y%m%dT%H%MZ")


def _short(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S" if t.second else "%Y-%m-%d %H:%M")


def parse_duration(text: str) -> dt.timedelta | None:
    """'500ms', '2s', '2', '1.5 min', '7d' -> a timedelta (bare numbers are seconds); None if the
    text is not a duration."""
    m = _DURATION.match(str(text))
    if not m:
        return None
    return dt.timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def parse_time(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """An ISO date / datetime or 'now', as an aware UTC datetime."""
    t = text.strip()
    if t.lower() == "now":
        return (now or dt.datetime.now(UTC)).astimezone(UTC)
    try:
        value = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise PeriodError(
            f"cannot read time {text!r}: give an ISO date or time (2026-11-02, "
            "2026-11-02T06:00, 2026-11-02T06:00+01:00), 'now', or for --since a duration (24h, 7d)"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def resolve_period(
    since: str | None,
    until: str | None,
    latest: dt.datetime | None,
    now: dt.datetime | None = None,
) -> Period:
    """--since / --until to a Period. ``latest`` is the last arrival in the warehouse."""
    end = parse_time(until, now) if until else None
    start = None
    if since:
        d = parse_duration(since)
        if d is not None:
            ref = end or (latest + dt.timedelta(microseconds=1) if latest else None)
            if ref is None:
                raise PeriodError(
                    f"--since {since} counts back from --until or the latest arrival, "
                    "and the warehouse has no wall-clock arrivals; give --until"
                )
            start = ref - d
            end = end or ref
        else:
            start = parse_time(since, now)
    if start and end and start >= end:
        raise PeriodError(
            f"--since ({start.isoformat()}) must be before --until ({end.isoformat()})"
        )
    return Period(start, end)


def previous(period: Period, compare_with: str | None) -> Period | None:
    """The period to compare with: 'previous' (default), 'none', a shift ('7d'), or 'A..B'."""
    spec = (compare_with or "previous").strip()
    if spec.lower() == "none":
        return None
    if ".." in spec:
        a, b = spec.split("..", 1)
        p = Period(parse_time(a), parse_time(b))
        if p.start >= p.end:  # type: ignore[operator]
            raise PeriodError(f"--compare-with {spec}: the start must be before the end")
        return p
    if not period.bounded:
        return None  # an open-ended report has no period of the same length before it
    if spec.lower() == "previous":
        shift = period.length
    else:
        shift = parse_duration(spec)
        if shift is None:
            raise PeriodError(
                f"--compare-with {spec!r}: give 'previous', 'none', a shift such as 7d, "
                "or a range START..END"
            )
    return Period(period.start - shift, period.end - shift)  # type: ignore[operator]


def aligned_window(latest: dt.datetime, length: dt.timedelta) -> Period:
    """The window of ``length`` (aligned to the Unix epoch, UTC) that contains ``latest``."""
    secs = length.total_seconds()
    if secs <= 0:
        raise PeriodError("the window must be longer than zero")
    start_s = (latest.timestamp() // secs) * secs
    start = dt.datetime.fromtimestamp(start_s, UTC)
    return Period(start, start + length)
