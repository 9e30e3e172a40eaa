"""Each document format on the tiny run: a file written with the format's own library,
translated, and read back with it: the structure and everything that is not prose kept,
the prose translated. The prose is in the sample corpus's language (data/make_sample.py),
which any run of the tiny config translates sensibly, whatever the CPU it trained on."""

import io
import shutil
import subprocess
import sys

import docx
import pytest
import srt
import webvtt
from bs4 import BeautifulSoup
from markdown_it import MarkdownIt

from seq2seq.decoding.translator import Translator
from seq2seq.documents import format_of, translate_document

from helpers import ROOT


@pytest.fixture(scope="module")
def translator(trained_run):
  return Translator.load(trained_run)


def test_plain_text_keeps_its_lines_and_paragraphs(translator, tmp_path):
  path = tmp_path / "a.txt"
  path.write_text(("A man is running in the park. Two dogs are playing in the snow.\n"
                  "A child is sleeping on a bench.\n\n\nA woman is waiting at the beach.\n"), "utf-8")
  out = translate_document(translator, path)
  paragraphs = out.split("\n\n\n")
  assert len(paragraphs) == 2 and out.endswith("\n") and paragraphs[0].count("\n") == 1
  assert paragraphs[1] == translator.translate("A woman is waiting at the beach.\n")


def test_markdown_keeps_code_links_images_and_structure(translator, tmp_path):
  source = ("# A dog is running in the park\n\nA young **man** is carrying a "
            "[red ball](https://x.org/b \"t\") with `x = 1` on the street.\n\n"
            "- A child is sleeping on a bench.\n- Two [women](y.html) are sitting in the park.\n\n"
            "```python\nprint('A dog runs.')\n```\n\n| A man | A woman |\n|---|---|\n"
            "| A boy | A girl |\n\n![a dog](dog.png) A child is playing in the snow.\n")
  path = tmp_path / "a.md"
  path.write_text(source, "utf-8")
  out = translate_document(translator, path)
  md = MarkdownIt("commonmark").enable("table")
  kinds = lambda text: [t.type for t in md.parse(text)]  # noqa: E731
  assert kinds(out) == kinds(source)  # the same blocks in the same order
  assert "```python\nprint('A dog runs.')\n```\n" in out and "`x = 1`" in out
  assert "](https://x.org/b \"t\")" in out and "](y.html)" in out
  assert "![a dog](dog.png)" in out and "**" in out
  assert out.count("|") == source.count("|")
  heading = out.splitlines()[0]
  assert heading.startswith("# ") and heading[2:] == translator.translate("A dog is running in the park")


def test_html_keeps_tags_attributes_and_what_is_not_prose(translator, tmp_path):
  source = ('<!DOCTYPE html><html lang="en"><head><title>A dog is running in the park.</title>'
            '<style>p { color: red }</style><script>var a = "A dog runs.";</script></head>'
            '<body><!-- A note --><p class="x">A <b>young</b> man is carrying a '
            '<a href="https://x.org" title="t">red ball</a> on the street.</p>'
            '<ul><li>A child is sleeping on a bench.<br>A dog is holding <code>ball()</code> '
            'near the water.</li></ul>'
            '<pre>A dog runs.</pre><p translate="no">A dog runs.</p></body></html>')
  path = tmp_path / "a.html"
  path.write_text(source, "utf-8")
  out = translate_document(translator, path)
  before, after = BeautifulSoup(source, "html.parser"), BeautifulSoup(out, "html.parser")
  tags = lambda soup: [(t.name, dict(t.attrs)) for t in soup.find_all(True)]  # noqa: E731
  assert tags(after) == tags(before)
  for kept in ("<style>p { color: red }</style>", '<script>var a = "A dog runs.";</script>',
               "<!-- A note -->", "<pre>A dog runs.</pre>", "<code>ball()</code>",
               '<p translate="no">A dog runs.</p>'):
    assert kept in out
  paragraph = after.find("p", class_="x")
  assert paragraph.get_text() == translator.translate(
      "A young man is carrying a red ball on the street.")
  assert after.title.get_text() == translator.translate("A dog is running in the park.")


def test_subtitles_keep_numbers_timings_settings_and_line_counts(translator, tmp_path):
  cues = [srt.Subtitle(1, srt.timedelta(seconds=1), srt.timedelta(seconds=3.5),
                       "A young man is carrying\na red ball on the street."),
          srt.Subtitle(7, srt.timedelta(seconds=4), srt.timedelta(seconds=6),
                       "<i>Two dogs</i> are playing in the snow.")]
  path = tmp_path / "a.srt"
  path.write_text(srt.compose(cues, reindex=False), "utf-8")
  out = list(srt.parse(translate_document(translator, path)))
  assert [(c.index, c.start, c.end) for c in out] == [(c.index, c.start, c.end) for c in cues]
  assert out[0].content.count("\n") == 1
  assert " ".join(out[0].content.split()) == translator.translate(
      "A young man is carrying a red ball on the street.")
  italic = out[1].content  # one italic span, on the words the alignment gives it
  assert italic.count("<i>") == italic.count("</i>") == 1
  assert italic.index("<i>") < italic.index("</i>")
  assert italic.replace("<i>", "").replace("</i>", "") == translator.translate(
      "Two dogs are playing in the snow.")

  vtt = ("WEBVTT\n\nNOTE made by a test\n\nintro\n00:00:01.000 --> 00:00:03.500 align:start\n"
         "<v Bob>A young man is carrying\na red ball in the park.\n\n"
         "00:00:04.000 --> 00:00:06.000\nTwo dogs are playing in the snow.\n")
  path = tmp_path / "a.vtt"
  path.write_text(vtt, "utf-8")
  written = translate_document(translator, path)
  before, after = (webvtt.from_buffer(io.StringIO(t)) for t in (vtt, written))
  assert [(c.identifier, c.start, c.end) for c in after] == [
      (c.identifier, c.start, c.end) for c in before]
  assert "NOTE made by a test" in written and "align:start" in written
  assert after.captions[0].raw_text.startswith("<v Bob>")
  assert after.captions[1].text == translator.translate("Two dogs are playing in the snow.")


def _docx(path):
  d = docx.Document()
  d.add_heading("A dog is running in the park.", 1)
  p = d.add_paragraph("A young ")
  p.add_run("man").bold = True
  p.add_run(" is carrying a red ball. Two dogs are playing in the snow.")
  table = d.add_table(rows=1, cols=2)
  table.cell(0, 0).text = "A child is sleeping on a bench."
  table.cell(0, 1).text = "A woman is waiting at the beach."
  d.sections[0].header.paragraphs[0].text = "A man is standing near the water."
  d.add_paragraph("A girl is sitting in the park.", style="List Bullet")
  d.save(path)
  return d


def test_docx_keeps_styles_runs_tables_and_headers(translator, tmp_path):
  source = _docx(tmp_path / "a.docx")
  translate_document(translator, tmp_path / "a.docx", tmp_path / "b.docx")
  out = docx.Document(tmp_path / "b.docx")
  assert [p.style.name for p in out.paragraphs] == [p.style.name for p in source.paragraphs]
  assert out.paragraphs[0].text == translator.translate("A dog is running in the park.")
  runs = out.paragraphs[1].runs
  assert [r.bold for r in runs if r.bold] == [True] and len(runs) >= 2
  assert out.paragraphs[1].text == translator.translate(
      "A young man is carrying a red ball. Two dogs are playing in the snow.")
  assert [c.text for c in out.tables[0].rows[0].cells] == translator.translate(
      ["A child is sleeping on a bench.", "A woman is waiting at the beach."])
  assert out.sections[0].header.paragraphs[0].text == translator.translate(
      "A man is standing near the water.")


def test_the_command_line_translates_documents_and_refuses_what_it_cannot(trained_run, tmp_path):
  _docx(tmp_path / "a.docx")
  command = [sys.executable, str(ROOT / "translate.py"), "--workdir", str(trained_run)]
  done = subprocess.run(command + ["--input", tmp_path / "a.docx", "--output",
                                   tmp_path / "b.docx"], capture_output=True, text=True)
  assert done.returncode == 0, done.stderr
  assert docx.Document(tmp_path / "b.docx").paragraphs[0].text
  refused = subprocess.run(command + ["--input", tmp_path / "a.docx"], capture_output=True,
                           text=True)
  assert refused.returncode == 2 and "give --output FILE" in refused.stderr
  (tmp_path / "a.md").write_text("# A dog is running in the park\n", "utf-8")
  done = subprocess.run(command + ["--input", tmp_path / "a.md"], capture_output=True,
                        text=True)
  assert done.returncode == 0 and done.stdout.startswith("# ")


def test_formats_are_named_by_extension_or_given():
  assert format_of("a.HTM") == "html" and format_of("a.md", "txt") == "txt"
  assert format_of("deck.PPTX") == "pptx" and format_of("book.epub") == "epub"
  with pytest.raises(ValueError, match=r"a\.pdf: \.pdf documents are not translated .*"
                                       r"convert it to \.docx or \.odt"):
    format_of("a.pdf")
  with pytest.raises(ValueError, match=r"a\.xyz: cannot tell the document format"):
    format_of("a.xyz")
  with pytest.raises(ValueError, match="unknown document format 'pdf'"):
    format_of("a.txt", "pdf")


def test_subtitles_without_numbers_are_numbered_and_tagged_cues_keep_their_lines(
    translator, tmp_path):
  path = tmp_path / "a.srt"
  path.write_text("00:00:01,000 --> 00:00:02,000\nA young man is running\nin the park.\n\n"
                  "00:00:03,000 --> 00:00:04,000\n<font color=\"#ffff00\">Two dogs</font> are "
                  "playing\nin the <u>snow</u>.\n", "utf-8")
  out = list(srt.parse(translate_document(translator, path, progress=False)))
  assert [c.index for c in out] == [1, 2]
  assert out[1].content.count("\n") == 1  # two lines, as the cue had
  assert out[1].content.count('<font color="#ffff00">') == 1
  assert out[1].content.count("</font>") == 1 and out[1].content.count("<u>") == 1


@pytest.mark.parametrize("name, data, words", [
    ("a.srt", b"1\n00:00:01,000 --> garbage\nHello.\n", "not a valid srt document"),
    ("a.vtt", b"not a web vtt file\n", "not a valid vtt document"),
    ("a.docx", b"this is not a zip", "not a valid docx document (BadZipFile"),
    ("a.docx", None, "not a valid docx document"),
    ("a.txt", bytes(range(256)) * 8, "must be text"),
    ("a.odt", b"PK\x03\x04" + bytes(60), "not a valid odt document"),
    ("a.pptx", b"not a zip", "not a valid pptx document"),
    ("a.epub", b"PK\x03\x04" + bytes(60), "not a valid epub document"),
])
def test_a_malformed_document_is_named_by_the_command_line_in_one_line(trained_run, tmp_path,
                                                                       name, data, words):
  import zipfile

  from conftest import run_cli
  path = tmp_path / name
  if data is None:  # a zip that is not a Word document: its XML declares an entity
    with zipfile.ZipFile(path, "w") as z:
      z.writestr("[Content_Types].xml", '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a '
                 '"aaaa">]><Types>&a;</Types>')
  else:
    path.write_bytes(data)
  proc = run_cli("translate.py", "--workdir", trained_run, "--input", path, "--format",
                 name.rsplit(".", 1)[1], "--output", tmp_path / ("out." + name), check=False)
  err = proc.stderr.decode()
  assert proc.returncode == 1 and words in err and str(path) in err, err[-2000:]
  assert "Traceback" not in err


@pytest.mark.parametrize("name", ["p.pdf", "p.ods", "unknown.bin"])
def test_a_document_format_not_translated_here_is_named_with_those_that_are(trained_run,
                                                                            tmp_path, name):
  from conftest import run_cli
  path = tmp_path / name
  path.write_bytes(b"PK\x03\x04" + bytes(60) if not name.endswith("pdf") else b"%PDF-1.7\n")
  proc = run_cli("translate.py", "--workdir", trained_run, "--input", path, check=False)
  err = proc.stderr.decode()
  assert proc.returncode == 2 and "not a format translated here" in err and ".epub" in err
  assert ("convert it to .docx or .odt" in err) == name.endswith(".pdf")


PANDOC = shutil.which("pandoc")
NO_PANDOC = "pandoc writes the .odt, .pptx and .epub files (Debian: apt-get install pandoc; " \
            ".ci/run does)"
PROSE = ["A young man is running in the park.", "Two dogs are playing in the snow.",
         "A woman is sitting on a bench.", "Three children are holding a ball."]
SOURCE_MD = (f"# A young man\n\n{PROSE[0]} **{PROSE[1]}**\n\n- {PROSE[2]}\n- *{PROSE[3]}*\n\n"
             f"| A dog | A cat |\n|---|---|\n| {PROSE[0]} | {PROSE[3]} |\n")


def pandoc(*args, input_text=None) -> str:
  return subprocess.run([PANDOC, *map(str, args)], input=input_text, capture_output=True,
                        text=True, check=True).stdout


@pytest.mark.skipif(not PANDOC, reason=NO_PANDOC)
@pytest.mark.parametrize("fmt", ["odt", "epub"])
def test_text_documents_made_by_pandoc_come_back_whole_and_translated(translator, tmp_path,
                                                                      fmt):
  """Written by pandoc from Markdown, translated, read back by pandoc: heading, list,
  table and emphasis where they were, the prose as the model translates it."""
  (tmp_path / "a.md").write_text(SOURCE_MD)
  source, out = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
  pandoc(tmp_path / "a.md", "-o", source, "--metadata", "title=A report")
  translate_document(translator, source, out, progress=False)
  before = pandoc(source, "-t", "markdown", "--wrap=none")
  after = pandoc(out, "-t", "markdown", "--wrap=none")
  plain = pandoc(out, "-t", "plain", "--wrap=none")
  def shape(text):  # heading, paragraph, list item, table rule or row: each line's kind
    return [line.lstrip()[0] if line.lstrip()[0] in "#-|+" else "p"
            for line in text.splitlines() if line.strip()]
  assert shape(after) == shape(before)
  assert after.count("**") == before.count("**") == 2 and after.count("*") == before.count("*")
  for sentence in (PROSE[2], PROSE[3]):  # a list item, a table cell
    assert translator.translate(sentence) in plain
  assert "A woman is sitting" not in plain and "Three children" not in plain


@pytest.mark.skipif(not PANDOC, reason=NO_PANDOC)
def test_a_presentation_made_by_pandoc_keeps_its_slides_runs_and_notes(translator, tmp_path):
  import pptx
  slides = (f"# A young man\n\n- {PROSE[0]}\n- **{PROSE[1]}**\n\n::: notes\n{PROSE[2]}\n:::\n\n"
            f"# Two dogs\n\n{PROSE[3]}\n")
  (tmp_path / "a.md").write_text(slides)
  source, out = tmp_path / "a.pptx", tmp_path / "b.pptx"
  pandoc(tmp_path / "a.md", "-o", source)
  translate_document(translator, source, out, progress=False)

  def read(path):
    deck = pptx.Presentation(path)
    texts = [[p.text for shape in slide.shapes if shape.has_text_frame
              for p in shape.text_frame.paragraphs] for slide in deck.slides]
    bold = [r.text for slide in deck.slides for shape in slide.shapes if shape.has_text_frame
            for p in shape.text_frame.paragraphs for r in p.runs if r.font.bold]
    notes = [slide.notes_slide.notes_text_frame.text for slide in deck.slides
             if slide.has_notes_slide]
    return texts, bold, notes
  texts, bold, notes = read(out)
  before, bold_before, _ = read(source)
  assert [len(t) for t in texts] == [len(t) for t in before]  # slides and paragraphs
  assert texts[0][0] == translator.translate("A young man")
  assert translator.translate(PROSE[0]) in texts[0]
  assert bold_before and bold and " ".join(bold) != " ".join(bold_before)
  assert notes and notes[0] == translator.translate(PROSE[2])


def test_a_presentation_in_opendocument_keeps_its_frames_styles_and_notes(translator,
                                                                          tmp_path):
  """An .odp (ODF's presentation XML, as LibreOffice Impress writes it): text boxes on
  the slide, a styled span and a link, speaker notes."""
  import zipfile

  from lxml import etree
  ns = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
        'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
        'xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0" '
        'xmlns:xlink="http://www.w3.org/1999/xlink"')
  content = (f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ns} '
             'office:version="1.3"><office:body><office:presentation>'
             '<draw:page draw:name="page1"><draw:frame><draw:text-box>'
             f'<text:p>{PROSE[0]} <text:span text:style-name="T1">{PROSE[1]}</text:span>'
             '</text:p><text:p>A <text:a xlink:href="https://x.org">dog</text:a> runs.'
             '<text:line-break/>Two dogs play.</text:p>'
             '</draw:text-box></draw:frame><presentation:notes><draw:frame><draw:text-box>'
             f'<text:p>{PROSE[2]}</text:p></draw:text-box></draw:frame></presentation:notes>'
             '</draw:page></office:presentation></office:body></office:document-content>')
  source, out = tmp_path / "a.odp", tmp_path / "b.odp"
  with zipfile.ZipFile(source, "w") as z:
    z.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.presentation")
    z.writestr("content.xml", content)
    z.writestr("Pictures/x.png", b"\x89PNG not really")
  translate_document(translator, source, out, progress=False)
  with zipfile.ZipFile(out) as z:
    assert z.namelist()[0] == "mimetype" and z.getinfo("mimetype").compress_type == 0
    assert z.read("Pictures/x.png") == b"\x89PNG not really"
    root = etree.fromstring(z.read("content.xml"))
  text = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
  paragraphs = list(root.iter(f"{text}p"))
  first = "".join(paragraphs[0].itertext())
  assert first == translator.translate(f"{PROSE[0]} {PROSE[1]}")
  assert [s.get(f"{text}style-name") for s in paragraphs[0].iter(f"{text}span")] == ["T1"]
  assert paragraphs[1].find(f"{text}line-break") is not None
  assert [a.get("{http://www.w3.org/1999/xlink}href")
          for a in paragraphs[1].iter(f"{text}a")] == ["https://x.org"]
  assert "".join(paragraphs[2].itertext()) == translator.translate(PROSE[2])


SOFFICE = shutil.which("soffice")


@pytest.mark.skipif(not (SOFFICE and PANDOC), reason="LibreOffice writes the .odp file and "
                    "reads it back (Debian: apt-get install libreoffice-impress-nogui pandoc; "
                    ".ci/run does)")
def test_a_presentation_made_by_libreoffice_comes_back_in_it_translated(translator, tmp_path):
  import pptx

  def soffice(path, to):
    profile = (tmp_path / "profile").as_uri()
    subprocess.run([SOFFICE, f"-env:UserInstallation={profile}", "--headless",
                    "--convert-to", to, "--outdir", str(tmp_path / to), str(path)],
                   check=True, capture_output=True, timeout=300)
    return tmp_path / to / (path.stem + "." + to)

  (tmp_path / "a.md").write_text(f"# A young man\n\n- {PROSE[0]}\n- **{PROSE[1]}**\n\n"
                                 f"::: notes\n{PROSE[2]}\n:::\n")
  pandoc(tmp_path / "a.md", "-o", tmp_path / "a.pptx")
  source = soffice(tmp_path / "a.pptx", "odp")  # LibreOffice Impress's own .odp
  out = tmp_path / "b.odp"
  translate_document(translator, source, out, progress=False)
  deck = pptx.Presentation(soffice(out, "pptx"))  # read back by LibreOffice
  texts = [p.text for slide in deck.slides for shape in slide.shapes if shape.has_text_frame
           for p in shape.text_frame.paragraphs]
  bold = [r.text for slide in deck.slides for shape in slide.shapes if shape.has_text_frame
          for p in shape.text_frame.paragraphs for r in p.runs if r.font.bold]
  notes = [slide.notes_slide.notes_text_frame.text for slide in deck.slides
           if slide.has_notes_slide]
  assert texts == [translator.translate(t) for t in ("A young man", PROSE[0], PROSE[1])]
  assert bold == [translator.translate(PROSE[1])]
  assert notes == [translator.translate(PROSE[2])]


def _named_formats(path) -> list[str]:
  """The lists of formats in a module's code (docstrings aside): a string that names two
  formats' extensions or more (a help text, an error listing them), and a literal
  collection that holds two format names or extensions or more. (One extension alone, a
  .txt file of hypotheses, say, is no list of formats.)"""
  import ast
  import re

  from seq2seq.documents.formats import EXTENSIONS, FORMATS
  extension = re.compile(r"(?<![\w.])(" + "|".join(re.escape(e) for e in EXTENSIONS)
                         + r")\b", re.IGNORECASE)
  tree = ast.parse(path.read_text())
  docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
                                     ast.ClassDef))
                and node.body and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)}
  found = []
  for node in ast.walk(tree):
    if (isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
        and len({m.lower() for m in extension.findall(node.value)}) >= 2):
      found.append(f"line {node.lineno}: {node.value[:60]!r}")
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
      items = node.keys if isinstance(node, ast.Dict) else node.elts
      names = [i.value for i in items if isinstance(i, ast.Constant)
               and (i.value in FORMATS or i.value in EXTENSIONS)]
      if len(names) >= 2:
        found.append(f"line {node.lineno}: {names}")
  return found


def test_the_registry_is_the_only_list_of_document_formats():
  """documents/formats.py names each format once; the command line, the server, the
  OpenAPI document and the docs read it. The control: the pattern finds the registry's
  own lists."""
  package = ROOT / "seq2seq"
  assert _named_formats(package / "documents" / "formats.py")
  named = {str(p.relative_to(ROOT)): found for p in sorted(package.rglob("*.py"))
           if p.name != "formats.py" and (found := _named_formats(p))}
  assert not named, named


def test_the_docs_table_of_formats_is_the_registry_s():
  from seq2seq.documents.formats import docs_table
  assert docs_table() in (ROOT / "docs" / "translating.md").read_text(), (
      "docs/translating.md's table of formats differs from the registry's: paste "
      "python -c 'from seq2seq.documents.formats import docs_table; print(docs_table())'")
