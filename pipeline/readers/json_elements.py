"""Where a large JSON document's arrays and their elements lie, found without parsing it.

A vectorised structural scan (the idea of simdjson's stage 1, in numpy): the file is read a
window at a time and, per window, whole-array operations find the quotes that open or close
strings (a quote preceded by an odd run of backslashes is escaped; a run may cross a window
edge), which bracket, brace, comma and colon bytes lie outside strings, and the nesting level of
each. State (in a string or not, the backslash run at the window's end, the depth) is carried from
one window to the next, so the Python loop is per window, never per byte or per element.

Only structural characters up to a caller-given level are kept (a few per array element at the
element level), so the result is small whatever the size of the elements. From it a reader finds
the members of objects by key, the byte span of an array and the spans of its elements, then
reads the elements in batches of whole elements (see :class:`ElementArray`). The scan checks what
it cheaply can (UTF-8, raw control bytes inside strings, balanced brackets, a closed final
string) and returns None otherwise, so the caller can fall back to a full parser that reports the
error properly; it does not validate tokens: the caller parses every byte it is given.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from pipeline.readers.vllm_bench import Source

WINDOW = 16 * 1024 * 1024  # bytes scanned per numpy pass: keeps the temporaries to ~100 MiB
BATCH_BYTES = 32 * 1024 * 1024  # element text per batch handed to the caller
_KEY_LOOKBACK = 512  # bytes read before a colon to recognise its key (longer keys: no match)
_BLANK_PROBE = 4096

_QUOTE, _BACKSLASH = 0x22, 0x5C
_OPEN = frozenset(b"{[")
_CLOSE = frozenset(b"}]")
_DELTA = np.zeros(256, dtype=np.int8)
_DELTA[list(b"{[")] = 1
_DELTA[list(b"}]")] = -1
_IS_OPEN = np.zeros(256, dtype=np.int8)
_IS_OPEN[list(b"{[")] = 1
_WS = b" \t\r\n"


@dataclass
class Structure:
    """The structural characters of a document up to ``max_level``, in file order.

    ``level`` is the depth a character sits at: the top-level value's brackets are at 0, the
    commas and colons directly inside it at 1, a nested container's own brackets at 1, ...
    """

    pos: np.ndarray  # int64 byte offsets
    char: np.ndarray  # uint8: one of {}[],:
    level: np.ndarray  # int16
    start: int  # offset of the document's first byte (3 after a UTF-8 BOM)
    max_level: int

    def close_of(self, i: int) -> int:
        """Index of the entry closing the container opened at entry ``i``."""
        lv = self.level[i]
        after = np.flatnonzero(self.level[i + 1 :] <= lv)
        if not after.size:
            raise ValueError("unclosed container")
        return i + 1 + int(after[0])


def scan(src: Source, max_level: int, window: int | None = None) -> Structure | None:
    """Structural characters of the whole document at levels <= ``max_level``; None when the
    bytes cannot be a valid JSON document (the caller then uses its ordinary parser)."""
    window = window or WINDOW
    head = src.read(0, 3)
    start = 3 if head == codecs.BOM_UTF8 else 0
    decoder = codecs.getincrementaldecoder("utf-8")()
    in_string = 0  # 1 while inside a string at the window's start
    bs_run = 0  # backslashes ending the previous window (only meaningful inside strings)
    depth = 0
    pos_parts: list[np.ndarray] = []
    char_parts: list[np.ndarray] = []
    level_parts: list[np.ndarray] = []
    at = start
    while at < src.size:
        w = src.read(at, at + window)
        if not w:
            break
        try:
            decoder.decode(w, final=False)  # validates UTF-8 across window edges; text dropped
        except UnicodeDecodeError:
            return None
        b = np.frombuffer(w, dtype=np.uint8)
        n = b.size
        quotes = np.flatnonzero(b == _QUOTE)
        bsl = np.flatnonzero(b == _BACKSLASH)
        escaped = np.zeros(quotes.size, dtype=bool)
        if quotes.size and quotes[0] == 0 and bs_run % 2 == 1:
            escaped[0] = True  # the last window's backslashes escape this window's first quote
        run_len_at_end = 0
        if bsl.size:
            # Runs of consecutive backslashes: a run starts where the offsets in ``bsl`` stop
            # being consecutive; the run before a quote at p is the count from that start to
            # p - 1 (plus the last window's run when it starts this window).
            run_first = np.concatenate(([0], np.flatnonzero(np.diff(bsl) != 1) + 1))
            sel = (quotes > 0) & (b[np.maximum(quotes - 1, 0)] == _BACKSLASH)
            if sel.any():
                k = np.searchsorted(bsl, quotes[sel] - 1)  # the backslash just before
                first = run_first[np.searchsorted(run_first, k, side="right") - 1]
                runs = k - first + 1 + np.where(bsl[first] == 0, bs_run, 0)
                escaped[sel] = runs % 2 == 1
            if bsl[-1] == n - 1:
                k_last = bsl.size - 1
                first_last = int(run_first[-1])
                run_len_at_end = k_last - first_last + 1 + (bs_run if bsl[first_last] == 0 else 0)
        quotes = quotes[~escaped]
        # A byte at p is inside a string when an odd number of string quotes precede it.
        ctrl = np.flatnonzero(b < 0x20)
        if ctrl.size:
            inside = (np.searchsorted(quotes, ctrl) + in_string) % 2 == 1
            if inside.any():
                return None  # raw control byte in a string: invalid JSON for a strict parser
            if not np.isin(b[ctrl], (9, 10, 13)).all():
                return None
        # {}[],: by comparisons (twice as fast as a lookup table): OR-ing 0x20 maps "[" to "{"
        # and "]" to "}" and no other byte onto either.
        folded = b | 0x20
        mask = folded == 0x7B
        mask |= folded == 0x7D
        del folded
        mask |= b == 0x2C
        mask |= b == 0x3A
        structural = np.flatnonzero(mask)
        del mask
        outside = (np.searchsorted(quotes, structural) + in_string) % 2 == 0
        structural = structural[outside]
        ch = b[structural]
        cum = np.cumsum(_DELTA[ch], dtype=np.int64) + depth
        level = cum - _IS_OPEN[ch]
        if level.size and int(level.min()) < 0:
            return None  # a close without its open
        keep = level <= max_level
        pos_parts.append(structural[keep].astype(np.int64) + at)
        char_parts.append(ch[keep])
        level_parts.append(level[keep].astype(np.int16))
        if cum.size:
            depth = int(cum[-1])
        in_string = (in_string + quotes.size) % 2
        bs_run = run_len_at_end
        at += n
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return None
    if in_string or depth != 0:
        return None  # unterminated string or unbalanced brackets
    pos = np.concatenate(pos_parts) if pos_parts else np.zeros(0, dtype=np.int64)
    if not pos.size:
        return None
    return Structure(
        pos=pos,
        char=np.concatenate(char_parts),
        level=np.concatenate(level_parts),
        start=start,
        max_level=max_level,
    )


def _is_blank(src: Source, begin: int, end: int) -> bool:
    """True when bytes [begin, end) are JSON whitespace only (read in probes, not at once)."""
    while begin < end:
        w = src.read(begin, min(end, begin + _BLANK_PROBE))
        if w.strip(_WS):
            return False
        begin += len(w)
    return True


def members(src: Source, st: Structure, open_i: int) -> dict[bytes, int | None]:
    """The keys of the object opened at entry ``open_i``: key -> index of the entry opening
    its value when the value is an object or array, else None. A key written with escapes, or a
    value whose container is deeper than ``max_level``, is absent or None: callers treat what
    they do not find as "not streamed" and leave it to their ordinary parser."""
    if st.char[open_i] != ord("{"):
        return {}
    close_i = st.close_of(open_i)
    lv = st.level[open_i] + 1
    idx = np.arange(open_i + 1, close_i)
    colons = idx[(st.level[open_i + 1 : close_i] == lv) & (st.char[open_i + 1 : close_i] == 58)]
    out: dict[bytes, int | None] = {}
    for ci in colons.tolist():  # one per member of a small object (document, benchmark, ...)
        p = int(st.pos[ci])
        before = src.read(max(st.start, p - _KEY_LOOKBACK), p).rstrip(_WS)
        if not before.endswith(b'"'):
            continue
        q = before.rfind(b'"', 0, len(before) - 1)
        if q < 0:
            continue
        key = before[q + 1 : -1]
        lead = before[:q].rstrip(_WS)
        # The key's opening quote follows "{" or "," (after whitespace): it is a real string
        # boundary, not an escaped quote inside a longer string.
        if not lead.endswith((b"{", b",")) or b"\\" in key:
            continue
        value: int | None = None
        nxt = ci + 1
        if (
            nxt < st.pos.size
            and st.level[nxt] == lv
            and int(st.char[nxt]) in _OPEN
            and _is_blank(src, p + 1, int(st.pos[nxt]))
        ):
            value = nxt
        out[key] = value
    return out


@dataclass
class ElementArray:
    """One array: ``begin``/``end`` span ``[`` ... ``]`` inclusive-exclusive; elements
    ``starts[k]``..``ends[k]`` (exclusive, may include surrounding whitespace)."""

    src: Source
    begin: int
    end: int
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64
    is_object: np.ndarray  # bool: the element's first structural char is its own "{"

    def __len__(self) -> int:
        return int(self.starts.size)

    def batches(
        self, max_bytes: int | None = None, max_rows: int | None = None
    ) -> Iterator[tuple[int, bytearray, np.ndarray]]:
        """(index of the first element, the elements as JSON lines, is_object) per batch of
        whole elements, about ``max_bytes`` of text (at least one element) per batch.

        Each line is one element's text as in the file (surrounding whitespace included), with
        its raw newlines turned into spaces: newlines outside strings are whitespace between
        tokens and inside strings they are always escaped in valid JSON, so this is safe; the
        commas between elements become the line breaks."""
        max_bytes = max_bytes or BATCH_BYTES
        n = len(self)
        max_rows = max_rows or n
        k = 0
        while k < n:
            base = int(self.starts[k])
            k2 = int(np.searchsorted(self.ends, base + max_bytes, side="right"))
            k2 = min(max(k2, k + 1), k + max_rows, n)
            chunk = bytearray(self.src.read(base, int(self.ends[k2 - 1])).translate(_ONE_LINE))
            np.frombuffer(chunk, dtype=np.uint8)[self.ends[k : k2 - 1] - base] = 10
            yield k, chunk, self.is_object[k:k2]
            k = k2


_ONE_LINE = bytes.maketrans(b"\r\n", b"  ")


def array_elements(src: Source, st: Structure, open_i: int) -> ElementArray | None:
    """The elements of the array opened at entry ``open_i`` (its elements' own brackets and
    separating commas must be within ``max_level``); None when an element is blank (a stray
    comma) or the array is not closed by "]"."""
    if st.char[open_i] != ord("["):
        return None
    close_i = st.close_of(open_i)
    if st.char[close_i] != ord("]") or st.level[close_i] != st.level[open_i]:
        return None
    lv = st.level[open_i] + 1
    if lv > st.max_level:
        return None
    sl = slice(open_i + 1, close_i)
    lvl, chars, pos = st.level[sl], st.char[sl], st.pos[sl]
    at_lv = lvl == lv
    commas = pos[at_lv & (chars == 44)]
    begin, end = int(st.pos[open_i]), int(st.pos[close_i]) + 1
    bounds = np.concatenate(([begin], commas, [end - 1])).astype(np.int64)
    starts, ends = bounds[:-1] + 1, bounds[1:]
    if not commas.size and _is_blank(src, begin + 1, end - 1):
        starts, ends = starts[:0], ends[:0]
    # An element is an object when a "{" at the element level starts it: the first structural
    # entry at that level inside its span is a "{" (anything before it would be invalid JSON,
    # which the caller's parser rejects).
    opens = pos[at_lv & (chars == ord("{"))]
    is_obj = np.zeros(starts.size, dtype=bool)
    if opens.size and starts.size:
        k = np.searchsorted(opens, starts)
        ok = k < opens.size
        is_obj[ok] = opens[np.minimum(k, opens.size - 1)][ok] < ends[ok]
    # Non-object elements (scalars, arrays) are rare: check each is not blank (a stray comma).
    for j in np.flatnonzero(~is_obj).tolist():
        if _is_blank(src, int(starts[j]), int(ends[j])):
            return None
    return ElementArray(src, begin, end, starts, ends, is_obj)
