"""Text documents in the encodings they come in (seq2seq/documents/encodings.py): read in
their own encoding, byte order mark and line endings, and written back in them; bytes
that are no text are refused by name. Through translate_document, on the tiny run."""

import codecs

import pytest

from seq2seq.decoding.translator import Translator
from seq2seq.documents import translate_document
from seq2seq.documents.encodings import DocumentError, TextFile, read_text

TEXT = "Zwei Hunde spielen im Schnee: „Café“, naïve, 3 €.\nÜber den Fluß.\n"


@pytest.mark.parametrize("data, encoding, bom", [
    (TEXT.encode("utf-8"), "utf-8", b""),
    (codecs.BOM_UTF8 + TEXT.encode("utf-8"), "utf-8", codecs.BOM_UTF8),
    (codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le"), "utf-16-le", codecs.BOM_UTF16_LE),
    (codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"), "utf-16-be", codecs.BOM_UTF16_BE),
    (TEXT.encode("cp1252"), "cp1252", b""),
])
def test_each_encoding_is_read_and_written_back_byte_for_byte(data, encoding, bom):
  found = read_text(data, "txt")
  assert found.text == TEXT and found.bom == bom
  assert codecs.lookup(found.encoding).name == codecs.lookup(encoding).name
  assert found.write(found.text) == data


def test_latin_1_and_crlf_line_endings_come_back_as_they_were():
  text = "Un garçon à la fenêtre.\r\nÜber die Straße.\r\n" * 3
  data = text.encode("latin-1")
  found = read_text(data, "srt")
  assert "\r" not in found.text and found.newline == "\r\n"
  assert found.write(found.text) == data
  assert found.write(found.text).decode(found.encoding) == text


def test_a_character_the_encoding_lacks_is_written_as_the_nearest_it_has():
  latin = TextFile("", "latin-1", b"", "\n")  # an ISO 8859-1 file: no „ “ – …
  assert latin.write("„Ein Mann“ – gut… Café\n") == b"\"Ein Mann\" - gut... Caf\xe9\n"
  assert latin.write("<p>„x“</p>", "html") == b"<p>&#8222;x&#8220;</p>"


def test_html_is_read_in_the_charset_it_declares():
  page = '<html><head><meta charset="iso-8859-15"></head><body>Caf\xe9 \u20ac</body></html>'
  found = read_text(page.encode("iso-8859-15"), "html")
  assert found.text == page and found.encoding == "iso8859-15"
  old = '<meta http-equiv="Content-Type" content="text/html; charset=windows-1252"><p>\xe9</p>'
  assert read_text(old.encode("cp1252"), "html").encoding == "cp1252"


@pytest.mark.parametrize("data, words", [
    (codecs.BOM_UTF8 + b"ok \xff\xfe", "UTF-8 byte order mark, but byte 6"),
    (bytes(range(256)) * 4, "must be text"),
])
def test_bytes_that_are_no_text_are_refused_by_name(data, words):
  with pytest.raises(DocumentError, match=words):
    read_text(data, "txt")


def test_a_windows_1252_subtitle_file_is_translated_and_written_back_in_it(trained_run,
                                                                           tmp_path):
  translator = Translator.load(trained_run)
  source = ("1\r\n00:00:01,000 --> 00:00:02,000\r\nA young man is running in the park.\r\n\r\n"
            "2\r\n00:00:03,000 --> 00:00:04,000\r\nTwo dogs are playing in the snow.\r\n")
  path, out = tmp_path / "a.srt", tmp_path / "b.srt"
  path.write_bytes(source.encode("cp1252") + "Café\r\n".encode("cp1252"))
  translate_document(translator, path, out, progress=False)
  data = out.read_bytes()
  assert b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
  text = data.decode("cp1252")
  assert translator.translate("A young man is running in the park.") in text
  assert text.startswith("1\r\n00:00:01,000 --> 00:00:02,000\r\n")
