"""Zipped documents (seq2seq/documents/packages.py): a zip bomb or a file that is no zip is
refused before a library reads it, and a rewritten package keeps its entries, with the
mimetype entry first and stored."""

import io
import zipfile

import pytest

from seq2seq.documents.encodings import DocumentError
from seq2seq.documents.packages import MAX_UNPACKED, check_package, rewrite, unreadable


def package(entries: dict, first: str = "mimetype") -> bytes:
  out = io.BytesIO()
  with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for name in sorted(entries, key=lambda n: n != first):
      z.writestr(name, entries[name])
  return out.getvalue()


def test_a_package_that_unpacks_too_far_or_is_no_zip_is_refused_by_name():
  check_package(package({"mimetype": "x", "a.xml": b"<a/>"}), "odt")
  bomb = package({"mimetype": "x", "big.xml": b"\0" * (MAX_UNPACKED // 2),
                  "bigger.xml": b"\0" * (MAX_UNPACKED // 2 + 1)})
  assert len(bomb) < MAX_UNPACKED // 500
  with pytest.raises(DocumentError, match=r"unpacks to more than 512 MB \(at 'bigger.xml'\)"):
    check_package(bomb, "docx")
  with pytest.raises(DocumentError, match="not a valid pptx document .BadZipFile"):
    check_package(b"not a zip", "pptx")
  assert "KeyError" in str(unreadable("epub", KeyError("x")))


def test_a_rewritten_package_keeps_its_entries_and_puts_the_mimetype_first_stored():
  data = package({"b.xml": b"<b>old</b>", "mimetype": "application/epub+zip",
                  "pic.png": b"\x89PNG..."}, first="b.xml")
  out = rewrite(data, "application/epub+zip",
                lambda name, content: content.replace(b"old", b"new") if name == "b.xml"
                else content)
  with zipfile.ZipFile(io.BytesIO(out)) as z:
    assert z.namelist() == ["mimetype", "b.xml", "pic.png"]
    assert z.getinfo("mimetype").compress_type == zipfile.ZIP_STORED
    assert z.read("b.xml") == b"<b>new</b>" and z.read("pic.png") == b"\x89PNG..."
