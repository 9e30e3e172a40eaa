"""Reading parallel text as users have it: lines of plain or gzipped UTF-8 files, pairs
of aligned files, tab-separated files and JSON Lines.

Every reader streams, and every problem is a `DataError` that names the file and the line:
invalid UTF-8, files of different lengths, a line without its tab, a record that is not
JSON or lacks a field.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import os
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


class DataError(ValueError):
  """Input data is missing or malformed; the message names the file and line."""


# ------------------------------------------------------------------------------ reading


def _open_binary(path: Path):
  try:
    return (gzip.open if path.suffix == ".gz" else open)(path, "rb")
  except OSError as e:
    raise DataError(f"{path}: cannot read: {e}") from e


def iter_lines(path: str | os.PathLike, strict: bool = True) -> Iterator[str]:
  """Lines of a UTF-8 text file, plain or gzipped, without their line endings, streamed.

  Only '\\n' ends a line (str.splitlines would also split on U+2028 and friends and
  misalign a parallel corpus). Invalid UTF-8 is an error naming the file and line.
  """
  path = Path(path)
  with _open_binary(path) as f:
    try:
      for number, raw in enumerate(f, 1):
        yield decode_line(raw[:-1] if raw.endswith(b"\n") else raw, f"{path},", number, strict)
    except (OSError, EOFError) as e:
      raise DataError(f"{path}: cannot read: {e}") from e


def read_lines(path: str | os.PathLike) -> list[str]:
  """All lines of a UTF-8 text file (plain or gzipped); see `iter_lines`."""
  return list(iter_lines(path))


def count_lines(path: str | os.PathLike) -> int:
  """Lines of a text file (plain or gzipped), counted without decoding or holding it."""
  path = Path(path)
  count, last = 0, b"\n"
  with _open_binary(path) as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      count, last = count + block.count(b"\n"), block[-1:]
  return count + (last != b"\n")


def split_lines(raw: bytes, name: str, strict: bool = True) -> list[str]:
  """Splits bytes on '\\n' and decodes each line as UTF-8.

  With `strict`, invalid UTF-8 raises DataError naming the line after the prefix `name`
  ("data/train.de," or "input"); otherwise it is replaced with U+FFFD and a warning.
  """
  chunks = raw.split(b"\n")
  if chunks and chunks[-1] == b"":
    chunks.pop()
  return [decode_line(chunk, name, number, strict) for number, chunk in enumerate(chunks, 1)]


def decode_line(chunk: bytes, name: str, number: int, strict: bool = True) -> str:
  """One line's bytes (without '\n') as text; a trailing '\r' is dropped. Invalid UTF-8
  raises DataError naming `name` and the line `number`, or with `strict=False` is
  replaced with U+FFFD and a warning."""
  try:
    return chunk.decode("utf-8").rstrip("\r")
  except UnicodeDecodeError as e:
    if strict:
      raise DataError(f"{name} line {number}: not valid UTF-8 ({e.reason} at byte "
                      f"{e.start})") from e
    log.warning("%s line %d: invalid UTF-8 replaced with U+FFFD", name, number)
    return chunk.decode("utf-8", errors="replace").rstrip("\r")


def iter_file_pair(src_path: str | os.PathLike, tgt_path: str | os.PathLike
                   ) -> Iterator[tuple[str, str]]:
  """Aligned lines of two files; files of different lengths are an error naming the
  first line that has no partner."""
  src_lines, tgt_lines = iter_lines(src_path), iter_lines(tgt_path)
  for number, (src, tgt) in enumerate(itertools.zip_longest(src_lines, tgt_lines), 1):
    if src is None or tgt is None:
      longer, shorter = (tgt_path, src_path) if src is None else (src_path, tgt_path)
      rest = 1 + sum(1 for _ in (tgt_lines if src is None else src_lines))
      raise DataError(f"{longer}, line {number}: no partner line in {shorter}, which has "
                      f"{number - 1} lines to its {number - 1 + rest}; parallel files "
                      "must be aligned line by line")
    yield src, tgt


def iter_tsv(path: str | os.PathLike) -> Iterator[tuple[str, str]]:
  """(source, target) of each line of a two-column tab-separated file. A blank line is an
  empty pair (cleaning drops it and counts it); a line with one column or more than two
  is an error naming it."""
  for number, line in enumerate(iter_lines(path), 1):
    if not line.strip():
      yield "", ""
      continue
    columns = line.split("\t")
    if len(columns) != 2:
      found = "no tab" if len(columns) == 1 else f"{len(columns)} columns"
      raise DataError(f"{path}, line {number}: expected 2 tab-separated columns (source, "
                      f"target), found {found}: {line[:80]!r}")
    yield columns[0], columns[1]


def field(record: dict, dotted: str):
  """`record["a"]["b"]` for "a.b"."""
  value = record
  for part in dotted.split("."):
    value = value[part]
  return value


def find_fields(record: dict, src_lang: str, tgt_lang: str, where: str) -> tuple[str, str]:
  """The (source, target) fields of a record when they are unambiguous: columns named
  by the languages ("en", "de"), a dictionary column holding both ("translation.en"), or
  columns named source/target or src/tgt. Otherwise an error listing the columns."""
  names = list(record)
  if src_lang in record and tgt_lang in record:
    return src_lang, tgt_lang
  nested = [k for k, v in record.items()
            if isinstance(v, dict) and src_lang in v and tgt_lang in v]
  if len(nested) == 1:
    return f"{nested[0]}.{src_lang}", f"{nested[0]}.{tgt_lang}"
  for pair in (("source", "target"), ("src", "tgt")):
    if all(p in record for p in pair):
      return pair
  raise DataError(f"{where}: cannot tell the source and target fields of {names} for "
                  f"{src_lang}->{tgt_lang}; set data.src_field and data.tgt_field (dotted "
                  "for nested fields, e.g. translation.en)")


def iter_jsonl(path: str | os.PathLike, src_field: str, tgt_field: str, src_lang: str,
               tgt_lang: str) -> Iterator[tuple[str, str]]:
  """(source, target) of each JSON object of a JSON Lines file; the fields are given, or
  found from the first record (`find_fields`)."""
  fields = (src_field, tgt_field) if src_field and tgt_field else None
  for number, line in enumerate(iter_lines(path), 1):
    where = f"{path}, line {number}"
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise DataError(f"{where}: not a JSON object ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict):
      raise DataError(f"{where}: expected a JSON object, found {type(record).__name__}")
    if fields is None:
      fields = find_fields(record, src_lang, tgt_lang, where)
    try:
      pair = tuple(field(record, f) for f in fields)
    except (KeyError, TypeError):
      raise DataError(f"{where}: no field {fields[0]!r} or {fields[1]!r}; the record has "
                      f"{list(record)}") from None
    if not all(isinstance(x, str) for x in pair):
      raise DataError(f"{where}: fields {fields} must hold strings, found "
                      f"{[type(x).__name__ for x in pair]}")
    yield pair


def one_line(text: str) -> str:
  """The text on one line: byte fallback can decode a newline piece, and an output file
  must keep one line per input line."""
  return " ".join(text.splitlines())
