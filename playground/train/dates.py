"""Synthetic date normalisation: human-written dates -> ISO 8601 `YYYY-MM-DD`, seeded.

Dates are drawn uniformly from 1950-01-01 .. 2049-12-31. Conventions that make every format
unambiguous (a model cannot guess what the writer meant otherwise):
- slashes with the year last are American, month first: "03/07/2021" is 7 March 2021;
- dots and dashes with the year last are day first: "7.3.2021", "07-03-2021";
- two-digit years pivot at 50: '21 -> 2021, '87 -> 1987;
- weekday names, when present, are always the true weekday of the date.
Each example picks one of `FORMATS` and, for Latin-script formats, a casing (as written, lower
or upper case).
"""

from __future__ import annotations

import datetime as dt
import random
import string
from collections.abc import Callable

FIRST, LAST = dt.date(1950, 1, 1), dt.date(2049, 12, 31)
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
MONTHS_ABBR = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WEEKDAYS_ABBR = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
WEEKDAYS_ZH = ["一", "二", "三", "四", "五", "六", "日"]

Format = Callable[[dt.date, random.Random], str]


def ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _month(d: dt.date, r: random.Random) -> str:
    return MONTHS[d.month - 1]


def _mon(d: dt.date, r: random.Random) -> str:
    """Abbreviated month, sometimes with a full stop; September also as "Sept"."""
    abbr = "Sept" if d.month == 9 and r.random() < 0.3 else MONTHS_ABBR[d.month - 1]
    return abbr + "." if r.random() < 0.25 and abbr != "May" else abbr


def _day(d: dt.date, r: random.Random) -> str:
    return str(d.day) if r.random() < 0.6 else ordinal(d.day)


def _yy(d: dt.date) -> str:
    return f"{d.year % 100:02d}"


FORMATS: dict[str, Format] = {
    "ordinal of month": lambda d, r: f"{ordinal(d.day)} of {_month(d, r)} {d.year}",
    "the ordinal of month, year": lambda d, r: f"the {ordinal(d.day)} of {_month(d, r)}, {d.year}",
    "weekday the ordinal of month": lambda d, r: f"{WEEKDAYS[d.weekday()]} the {ordinal(d.day)} of {_month(d, r)} {d.year}",
    "mon d, 'yy": lambda d, r: f"{_mon(d, r)} {d.day}, '{_yy(d)}",
    "month d, yyyy": lambda d, r: f"{_month(d, r)} {_day(d, r)}, {d.year}",
    "mon d yyyy": lambda d, r: f"{_mon(d, r)} {_day(d, r)} {d.year}",
    "d month yyyy": lambda d, r: f"{d.day} {_month(d, r)} {d.year}",
    "d mon yyyy": lambda d, r: f"{d.day} {_mon(d, r)} {d.year}",
    "d-mon-yyyy": lambda d, r: f"{d.day:0{r.choice((1, 2))}d}-{MONTHS_ABBR[d.month - 1]}-{d.year}",
    "weekday, d month yyyy": lambda d, r: f"{WEEKDAYS[d.weekday()]}, {d.day} {_month(d, r)} {d.year}",
    "weekday, month d, yyyy": lambda d, r: f"{WEEKDAYS[d.weekday()]}, {_month(d, r)} {_day(d, r)}, {d.year}",
    "wkd mon d yyyy": lambda d, r: f"{WEEKDAYS_ABBR[d.weekday()]} {MONTHS_ABBR[d.month - 1]} {d.day} {d.year}",
    "wkd, d mon yyyy": lambda d, r: f"{WEEKDAYS_ABBR[d.weekday()]}, {d.day} {_mon(d, r)} {d.year}",
    "mm/dd/yyyy": lambda d, r: f"{d.month:02d}/{d.day:02d}/{d.year}",
    "m/d/yy": lambda d, r: f"{d.month}/{d.day}/{_yy(d)}",
    "m/d/yyyy": lambda d, r: f"{d.month}/{d.day}/{d.year}",
    "dd.mm.yyyy": lambda d, r: f"{d.day:02d}.{d.month:02d}.{d.year}",
    "d.m.yy": lambda d, r: f"{d.day}.{d.month}.{_yy(d)}",
    "dd-mm-yyyy": lambda d, r: f"{d.day:02d}-{d.month:02d}-{d.year}",
    "yyyy/mm/dd": lambda d, r: f"{d.year}/{d.month:02d}/{d.day:02d}",
    "yyyy-m-d": lambda d, r: f"{d.year}-{d.month}-{d.day}",
    "yyyymmdd": lambda d, r: f"{d.year}{d.month:02d}{d.day:02d}",
    "chinese": lambda d, r: f"{d.year}年{d.month}月{d.day}日",
    "chinese with weekday": lambda d, r: f"{d.year}年{d.month}月{d.day}日 星期{WEEKDAYS_ZH[d.weekday()]}",
}
LATIN_CASED = {name for name in FORMATS if any(c.isalpha() for c in FORMATS[name](dt.date(2021, 3, 3), random.Random(0))) and "chinese" not in name}

# The character vocabulary: every ASCII letter and digit (so user input in any case tokenises),
# the punctuation the formats use, and the CJK characters of the Chinese formats.
ALPHABET = string.ascii_letters + string.digits + " ',-./:" + "年月日星期" + "".join(WEEKDAYS_ZH)


def random_date(r: random.Random) -> dt.date:
    return FIRST + dt.timedelta(days=r.randrange((LAST - FIRST).days + 1))


def render(d: dt.date, fmt: str, r: random.Random) -> str:
    text = FORMATS[fmt](d, r)
    if fmt in LATIN_CASED:
        roll = r.random()
        text = text.lower() if roll < 0.15 else text.upper() if roll < 0.25 else text
    return text


def example(r: random.Random) -> tuple[str, str]:
    """One (human-written date, ISO date) pair."""
    d = random_date(r)
    return render(d, r.choice(list(FORMATS)), r), d.isoformat()


def examples(n: int, seed: int) -> list[tuple[str, str]]:
    """`n` pairs from a generator seeded with `seed` (the same seed gives the same list)."""
    r = random.Random(seed)
    return [example(r) for _ in range(n)]
