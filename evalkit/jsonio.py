"""Reading files evalkit did not just make: JSON documents, JSON lines and text lines,
bounded and located (issue 29).

The importers, the eval-set loader, the `eval_sets.lock` reader, `--response-schema`, the
price file, the replay log and the run-folder readers all read through here, so one set of
rules holds for every file a user brings:

- Bytes first. A file is read in binary and a line ends at b"\\n" (a "\\r\\n" ending is fine),
  so a line number is exact: a text-mode reader decodes ahead, and blamed a bad byte on
  line 2001 of a BEIR corpus on line 1950. (The eval-set loader cuts its lines itself, as
  `bytes.splitlines` does, while it hashes them, and parses each with `loads`.)
- Strict UTF-8, said where: a bad byte is reported at its line and its byte in that line.
  A UTF-8 byte order mark at the start of a file is skipped.
- Strict JSON (RFC 8259, parsed by orjson): NaN, Infinity, a number too large for a double
  and a lone surrogate escape are not JSON.
- Bounded: a document nested deeper than `max_depth`, a file over `max_bytes` or a line over
  `max_line_bytes` is bad input (exit 2 with one line), never a RecursionError, and never a
  file read whole into memory because it was given by mistake (`/dev/zero`, a disk image).

Every error is an `InputError` (or the subclass the caller names with `error=`) holding one
Problem with the file, the line and, for a flag, the field. With `on_problem`, the line
readers hand each bad line to the caller and go on, so a file's problems are listed together.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from evalkit.errors import InputError, Problem

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE_BYTES",
    "MAX_WRITTEN_DEPTH",
    "iter_counted_lines",
    "iter_jsonl",
    "iter_lines",
    "loads",
    "read_bytes",
    "read_json",
    "read_text",
]

# Files people write nest a few levels (an eval-set case 4, a JSON Schema 2 per level of the
# data it describes). 64 leaves room, stays far below Python's recursion limit (1000) that the
# recursive walkers (redaction, validation) run into, and below orjson's write limit (254), so
# a case can still be written inside a run record.
MAX_DEPTH = 64
# What evalkit wrote itself: orjson writes at most 254 levels, so any run-folder file reads
# back (a record keeps the target's own JSON, nested as it came).
MAX_WRITTEN_DEPTH = 254
# A document is held whole, then parsed into objects several times its size. The largest one
# evalkit reads is a baseline.json, about 1.7 KB a case: 170 MB at 100,000 cases.
MAX_DOCUMENT_BYTES = 1 << 30
# A JSON-lines file has no size limit (a 1 GB BEIR corpus streams a line at a time); one line
# has. A corpus document or a fixture case is a few KB, and a logged response at most twice
# fits (--max-response-bytes, 32 MB by default).
MAX_LINE_BYTES = 64 << 20

_BOM = b"\xef\xbb\xbf"
_READ_CHUNK = 1 << 20  # the read buffer, and how much of an overlong line is skipped at a time
# A JSON string (escapes included), to take out before counting brackets.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENERS = bytes.maketrans(b"{}", b"[]")

Report = Callable[[Problem], None]


def read_bytes(
    path: str | Path,
    *,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    what: str = "",
    field: str | None = None,
    error: type[InputError] = InputError,
) -> bytes:
    """The bytes of `path`, refused past `max_bytes` before they are read.

    Args:
        path: the file.
        max_bytes: the most it may hold.
        what: what the file is, for the messages ("the schema": "cannot read the schema (...)").
        field: the flag that named the file, for the messages.
        error: the InputError subclass to raise.

    Raises:
        InputError (`error`): the file cannot be read, or holds more than `max_bytes`.
    """
    where = str(path)
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
                raise error(_too_large(what, max_bytes, where, field, info.st_size))
            data = f.read(max_bytes + 1)  # not a regular file (a pipe, /dev/zero): at most this
    except OSError as e:
        raise error(Problem(f"{_join('cannot read', what)} ({e.strerror or e})", path=where, field=field)) from None
    if len(data) > max_bytes:
        raise error(_too_large(what, max_bytes, where, field, None))
    return data


def read_text(
    path: str | Path,
    *,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    what: str = "",
    field: str | None = None,
    error: type[InputError] = InputError,
) -> str:
    """The text of `path`: strict UTF-8, a byte order mark dropped, line endings as they are.

    Raises:
        InputError (`error`): as `read_bytes`, or a byte that is not UTF-8 (its line and byte).
    """
    data = _drop_bom(read_bytes(path, max_bytes=max_bytes, what=what, field=field, error=error))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(_not_utf8(data, e, str(path), None, field)) from None


def read_json(
    path: str | Path,
    *,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    max_depth: int = MAX_DEPTH,
    what: str = "",
    field: str | None = None,
    error: type[InputError] = InputError,
) -> Any:
    """One JSON document from `path` (`read_bytes`, then `loads`).

    Args:
        path: the file.
        max_bytes: the most the file may hold.
        max_depth: the most levels of arrays and objects (`[]` is 1, `[[]]` 2).
        what: what the file is, for the messages.
        field: the flag that named the file, for the messages.
        error: the InputError subclass to raise.

    Returns:
        The parsed value.

    Raises:
        InputError (`error`): unreadable, too large, not UTF-8, not JSON, or too deep; one
            Problem with the file and, where it is known, the line.
    """
    data = read_bytes(path, max_bytes=max_bytes, what=what, field=field, error=error)
    return loads(data, max_depth=max_depth, path=str(path), field=field, error=error)


def loads(
    data: bytes,
    *,
    max_depth: int = MAX_DEPTH,
    path: str | None = None,
    line: int | None = None,
    field: str | None = None,
    error: type[InputError] = InputError,
    openers: int | None = None,
) -> Any:
    """Parse one JSON text: a whole document, or one line of a JSON-lines file.

    Args:
        data: the bytes; a whole document's byte order mark is skipped.
        max_depth: the most levels of arrays and objects.
        path: the file, for the messages.
        line: the 1-based line `data` is, in a JSON-lines file; None: `data` is the whole
            file, and a problem's line is counted in it.
        field: the flag or field, for the messages.
        error: the InputError subclass to raise.
        openers: how many `[` and `{` `data` holds (or more), when the caller counted them
            already (`iter_counted_lines`); None: counted here.

    Raises:
        InputError (`error`): not UTF-8 (the line and the byte in it), not JSON (the line and
            column), or nested deeper than `max_depth`.
    """
    if line is None:
        data = _drop_bom(data)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        # Said precisely, in this order: orjson's own message for a bad byte names neither
        # the byte nor where it is, and its depth limit (1024) is not ours.
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise error(_not_utf8(data, bad, path, line, field)) from None
        if _count_openers(data) > max_depth and _scan_depth(data, max_depth) > max_depth:
            raise error(_too_deep(max_depth, path, line, field)) from None
        at = line if line is not None else e.lineno
        raise error(Problem(f"not valid JSON ({e.msg}, column {e.colno})", path=path, line=at, field=field)) from None
    # Counting first keeps the common case cheap (a record of 9 KB has about 60 openers);
    # only a value with more openers than the limit is walked.
    if openers is None:
        openers = _count_openers(data)
    if openers > max_depth and _depth_exceeds(value, max_depth):
        raise error(_too_deep(max_depth, path, line, field))
    return value


def iter_lines(
    path: str | Path,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    field: str | None = None,
    error: type[InputError] = InputError,
    on_problem: Report | None = None,
) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without its line ending) of every line of a text file,
    blank ones included, read one line at a time.

    Args:
        path: the file.
        max_line_bytes: the most one line may hold.
        field: the flag that named the file, for the messages.
        error: the InputError subclass to raise.
        on_problem: given, each problem (an unreadable file, a line that is too long or not
            UTF-8) goes to it and the line is skipped; None: the first one is raised.

    Raises:
        InputError (`error`): the first problem, without `on_problem`.
    """
    report = on_problem or _raiser(error)
    where = str(path)
    for n, raw in _raw_lines(path, max_line_bytes, field, report):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            report(_not_utf8(raw, e, where, n, field))
            continue
        yield n, text.removesuffix("\n").removesuffix("\r")


def iter_jsonl(
    path: str | Path,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_depth: int = MAX_DEPTH,
    field: str | None = None,
    error: type[InputError] = InputError,
    on_problem: Report | None = None,
) -> Iterator[tuple[int, Any]]:
    """(1-based line number, parsed value) of each non-blank line of a JSON-lines file, read
    one line at a time (a file of any size; a line of at most `max_line_bytes`).

    Args:
        path: the file.
        max_line_bytes: the most one line may hold.
        max_depth: the most levels of arrays and objects in one line.
        field: the flag that named the file, for the messages.
        error: the InputError subclass to raise.
        on_problem: given, each problem (an unreadable file; a line too long, not UTF-8, not
            JSON or too deep) goes to it and the line is skipped; None: the first is raised.

    Raises:
        InputError (`error`): the first problem, without `on_problem`.
    """
    report = on_problem or _raiser(error)
    where = str(path)
    for n, raw in _raw_lines(path, max_line_bytes, field, report):
        if not raw or raw.isspace():
            continue
        if raw.endswith(b"\n"):  # a column on this line, not past its end
            raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
        try:
            value = loads(raw, max_depth=max_depth, path=where, line=n, field=field, error=error)
        except InputError as e:
            for p in e.problems:
                report(p)
            continue
        yield n, value


def iter_counted_lines(f: BinaryIO, end: int | None = None, *, chunk: int = 1 << 18) -> Iterator[tuple[bytes, int]]:
    """(line with its b"\\n", how many `[` and `{` it holds) of each line of `f` from where it
    stands, the last one without its ending if the file has none; up to the first line that
    starts at or past byte `end` (relative to where `f` started). No line length limit: for
    files evalkit wrote (results.jsonl), whose lines it reads whatever their size.

    The count is what `loads(..., openers=)` takes, so its depth guard need not count the
    line again: counted here for a block of lines at a time with numpy (a bracket test over
    the block, then one count_nonzero per line), it costs about a third of counting each
    line's two brackets with `bytes.count` (issue 39: that was 38 % of the parse).
    """
    import numpy as np

    buf = bytearray(chunk)
    view, data = memoryview(buf), np.frombuffer(buf, np.uint8)
    low, mask = np.empty(chunk, np.uint8), np.empty(chunk, np.bool_)
    count, find = np.count_nonzero, buf.find
    kept = pos = 0  # bytes of an unfinished line at the front of buf; bytes yielded
    while True:
        if kept == len(buf):  # one line longer than the buffer: make room
            view.release()
            del data
            buf.extend(bytes(len(buf)))
            view, data = memoryview(buf), np.frombuffer(buf, np.uint8)
            low, mask = np.empty(len(buf), np.uint8), np.empty(len(buf), np.bool_)
        got = f.readinto(view[kept:])
        filled = kept + (got or 0)
        cut = buf.rfind(b"\n", 0, filled) + 1 if got else filled  # at the end: the unterminated rest
        if not cut:
            if not got:
                return
            kept = filled
            continue
        # "[" (0x5B) and "{" (0x7B) are the only bytes that are 0x7B with bit 0x20 set.
        np.bitwise_or(data[:cut], 0x20, out=low[:cut])
        np.equal(low[:cut], 0x7B, out=mask[:cut])
        s = 0
        while s < cut:
            if end is not None and pos >= end:
                return
            e = find(b"\n", s, cut) + 1 or cut
            pos += e - s
            yield view[s:e].tobytes(), count(mask[s:e])
            s = e
        if not got:
            return
        kept = filled - cut
        buf[:kept] = view[cut:filled]


def _raw_lines(path: str | Path, max_line_bytes: int, field: str | None, report: Report) -> Iterator[tuple[int, bytes]]:
    """(1-based line, its bytes with the line ending) of a file; a first line's byte order
    mark dropped; a line over `max_line_bytes` is reported and skipped, its number counted."""
    where = str(path)
    try:
        f = open(path, "rb", buffering=_READ_CHUNK)  # noqa: SIM115 - closed by the with below
    except OSError as e:
        report(Problem(f"cannot read ({e.strerror or e})", path=where, field=field))
        return
    with f:
        n = 0
        while True:
            raw = f.readline(max_line_bytes + 1)
            if not raw:
                return
            n += 1
            if n == 1 and raw.startswith(_BOM):
                raw = raw[3:]
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                while (rest := f.readline(_READ_CHUNK)) and not rest.endswith(b"\n"):
                    pass  # the rest of the long line, not kept
                report(Problem(f"line longer than {_size(max_line_bytes)}, the most evalkit reads as one line",
                               path=where, line=n, field=field))
                continue
            yield n, raw


def _raiser(error: type[InputError]) -> Report:
    def report(problem: Problem) -> None:
        raise error(problem)

    return report


def _drop_bom(data: bytes) -> bytes:
    return data[3:] if data.startswith(_BOM) else data


def _count_openers(data: bytes) -> int:
    """An upper bound of the depth: every `[` and `{`, in strings too."""
    return data.count(b"[") + data.count(b"{")


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether a parsed value nests more than `limit` levels (a walk without recursion)."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False


def _scan_depth(data: bytes, limit: int) -> int:
    """How deep the brackets of text that is not JSON go, strings left out, up to `limit` + 1."""
    brackets = _STRING.sub(b"", data).translate(_OPENERS, _NOT_BRACKETS)
    depth = 0
    for b in brackets:
        depth += 1 if b == 0x5B else -1  # "[" (a "{" was made one)
        if depth > limit:
            break
    return depth


def _not_utf8(data: bytes, e: UnicodeDecodeError, path: str | None, line: int | None, field: str | None) -> Problem:
    """Where a bad byte is: `line` given, the byte in that line; else the line and byte, counted in `data`."""
    start = e.start
    if line is None:
        line = data.count(b"\n", 0, start) + 1
        start -= data.rfind(b"\n", 0, start) + 1
    message = f"not UTF-8 ({e.reason}: byte 0x{e.object[e.start]:02x} at byte {start + 1} of the line)"
    return Problem(message, path=path, line=line, field=field)


def _too_deep(limit: int, path: str | None, line: int | None, field: str | None) -> Problem:
    message = f"JSON nested too deeply: more than {limit} levels of arrays and objects"
    return Problem(message, path=path, line=line, field=field)


def _too_large(what: str, limit: int, path: str, field: str | None, size: int | None) -> Problem:
    got = f" ({_size(size)})" if size is not None else ""
    subject = f"{what} is too large" if what else "too large"
    return Problem(f"{subject}{got}: over {_size(limit)}, the most evalkit reads as one file", path=path, field=field)


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value.is_integer() else f"{value:.1f} {unit}"
    return f"{n} bytes"
