"""Five-field cron expressions (minute hour day-of-month month day-of-week) and their next fire.

Supports ``*``, lists ``1,15``, ranges ``1-5``, steps ``*/15`` / ``10-50/20`` / ``5/15``, month
and weekday names (``jan``, ``mon-fri``), ``7`` for Sunday, and ``@hourly``, ``@daily``
(``@midnight``), ``@weekly``, ``@monthly``, ``@yearly`` (``@annually``). As in Vixie cron, when
both day-of-month and day-of-week are restricted a day matching either one fires.

Times are wall-clock times of whatever datetimes you pass (naive local time or aware UTC).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# name, lowest, highest, names (index 0 is the value `lowest`)
FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, MONTHS),
    ("day of week", 0, 7, DAYS),
)


class CronError(ValueError):
    pass


def _value(text: str, lo: int, hi: int, names: tuple[str, ...], field: str) -> int:
    t = text.lower()
    if t in names:
        return names.index(t) + lo
    if not t.isdigit():
        raise CronError(f"{field}: {text!r} is not a number{' or a name' if names else ''}")
    v = int(t)
    if not lo <= v <= hi:
        raise CronError(f"{field}: {v} is outside {lo}-{hi}")
    return v


def _field(text: str, lo: int, hi: int, names: tuple[str, ...], field: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(f"{field}: empty list item in {text!r}")
        rng, _, step_s = part.partition("/")
        step = 1
        if step_s:
            if not step_s.isdigit() or int(step_s) == 0:
                raise CronError(f"{field}: step {step_s!r} must be a positive number")
            step = int(step_s)
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            x, y = rng.split("-", 1)
            a, b = _value(x, lo, hi, names, field), _value(y, lo, hi, names, field)
            if a > b:
                raise CronError(f"{field}: range {rng!r} runs backwards")
        else:
            a = _value(rng, lo, hi, names, field)
            b = hi if step_s else a
        out.update(range(a, b + 1, step))
    return frozenset(out)


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    dom_any: bool
    dow_any: bool

    def _day_ok(self, d: dt.date) -> bool:
        dom = d.day in self.days
        dow = (d.isoweekday() % 7) in self.weekdays
        if self.dom_any or self.dow_any:
            return dom and dow
        return dom or dow

    def next_after(self, t: dt.datetime) -> dt.datetime:
        """The first fire time strictly after ``t`` (same tzinfo, whole minutes)."""
        c = t.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        limit = c + dt.timedelta(days=366 * 5)  # e.g. "0 0 29 2 *" waits up to 8 years: fine
        while c < limit:
            if c.month not in self.months:
                year, month = (c.year + 1, 1) if c.month == 12 else (c.year, c.month + 1)
                c = c.replace(year=year, month=month, day=1, hour=0, minute=0)
            elif not self._day_ok(c.date()):
                c = (c + dt.timedelta(days=1)).replace(hour=0, minute=0)
            elif c.hour not in self.hours:
                c = (c + dt.timedelta(hours=1)).replace(minute=0)
            elif c.minute not in self.minutes:
                c = c + dt.timedelta(minutes=1)
            else:
                return c
        raise CronError(f"{self.text!r} never fires (e.g. 31 in a month that has no day 31)")


def parse_cron(text: str) -> Cron:
    expr = MACROS.get(text.strip().lower(), text.strip())
    parts = expr.split()
    if len(parts) != 5:
        raise CronError(
            f"{text!r}: a cron expression has five fields (minute hour day-of-month month "
            "day-of-week), e.g. '0 * * * *' for every hour"
        )
    sets = [
        _field(p, lo, hi, names, name)
        for p, (name, lo, hi, names) in zip(parts, FIELDS, strict=True)
    ]
    weekdays = frozenset(d % 7 for d in sets[4])
    return Cron(
        text=text,
        minutes=sets[0],
        hours=sets[1],
        days=sets[2],
        months=sets[3],
        weekdays=weekdays,
        dom_any=parts[2].startswith("*"),
        dow_any=parts[4].startswith("*"),
    )
