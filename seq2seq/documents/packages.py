"""Zipped documents (.docx, .odt, .odp, .pptx, .epub): checked before a library reads them,
rewritten entry by entry (the `mimetype` entry first and stored, as ODF and EPUB
require), and a reading library's failure named as the document's."""

from __future__ import annotations

import io
import zipfile
from typing import Callable

from seq2seq.documents.encodings import DocumentError

# The most a zipped document may hold once unpacked: a small upload must not unpack to
# gigabytes (a zip bomb).
MAX_UNPACKED = 512 * 2**20


def check_package(data: bytes, fmt: str) -> None:
  """Refuses a zipped document that is no zip, or that unpacks to more than
  `MAX_UNPACKED` bytes, naming the part."""
  try:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
      infos = z.infolist()
  except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError) as e:
    raise unreadable(fmt, e) from None
  total = 0
  for info in infos:
    total += info.file_size
    if total > MAX_UNPACKED:
      raise DocumentError(f"not a valid {fmt} document: it unpacks to more than "
                          f"{MAX_UNPACKED >> 20} MB (at {info.filename!r})")


def unreadable(fmt: str, error: Exception) -> DocumentError:
  """The DocumentError for a library that could not read a document of `fmt`."""
  reason = " ".join(str(error).split())[:200] or type(error).__name__
  return DocumentError(f"not a valid {fmt} document ({type(error).__name__}: {reason})")


def rewrite(data: bytes, mimetype: str, transform: Callable[[str, bytes], bytes]) -> bytes:
  """The package with each entry's content `transform(name, content)`, its `mimetype`
  entry first and stored; names, dates and order of the others kept."""
  source = zipfile.ZipFile(io.BytesIO(data))
  out = io.BytesIO()
  with zipfile.ZipFile(out, "w") as target:
    target.writestr(zipfile.ZipInfo("mimetype"), mimetype, zipfile.ZIP_STORED)
    for info in source.infolist():
      if info.filename != "mimetype":
        target.writestr(info, transform(info.filename, source.read(info.filename)),
                        zipfile.ZIP_DEFLATED)
  return out.getvalue()
