"""The server's answers to a fixed set of requests, both APIs, written down to be compared
across a change of the serving code (the same answers, byte for byte, or the change is
not a refactor).

  python bench/serve_identity.py --workdir MULTI_RUN --out answers.json
  python bench/serve_identity.py --compare before.json after.json [--changed NAME ...]

MULTI_RUN: a run of several directions with English among them (configs/tiny_multilingual.py
trained briefly will do: en-de, de-en, en-fr, fr-en), served alone with an API key file,
so that a request can go direct, through the pivot (de→fr) or to "auto". The requests:
the native API (plain, several texts, n-best, a glossary, source and target, auto, a
pivot, attention, sampling, prefixes), LibreTranslate's (JSON, a form, the query string,
alternatives, html, auto, a pivot, a glossary), /languages, /detect, /frontend/settings,
a document of every format /translate_file takes (made here; a package's translation
compared by its members, a zip's dates aside), and the errors
of the hostile-input tests and their kin (each named "error ...": a 4xx; every other
answer is a 200). /health and /openapi.json are left out: they
describe the server, and saying more there is no change of an answer.
"""

import argparse
import datetime
import hashlib
import io
import json
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from common import add_results_flag, report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from serve_helpers import start_server, stop_server  # noqa: E402

KEY = "k-1"
EN = ["A dog runs in the park.", "Two men play football.", "A woman reads a book."]
DE = "Ein Hund läuft im Park."
LT = {"source": "en", "target": "de"}

# (name, path, body: a dict sent as JSON, or (bytes, content type), or None for a GET)
REQUESTS = [
    ("native plain", "/translate", {"text": EN[0]}),
    ("native texts", "/translate", {"texts": EN}),
    ("native nbest", "/translate", {"texts": EN, "beam_size": 4, "nbest": 3}),
    ("native nbest one", "/translate", {"text": EN[1], "beam_size": 5, "nbest": 3}),
    ("native greedy alpha", "/translate", {"text": EN[2], "beam_size": 1, "alpha": 0.2}),
    ("native glossary", "/translate", {"text": EN[0], "glossary": {"dog": "Katze"}}),
    ("native en-fr", "/translate", {"text": EN[0], "source": "en", "target": "fr"}),
    ("native tgt_lang", "/translate", {"texts": EN, "tgt_lang": "fr"}),
    ("native de-en", "/translate", {"text": DE, "source": "de", "target": "en"}),
    ("native pivot", "/translate", {"text": DE, "source": "de", "target": "fr"}),
    ("native pivot nbest", "/translate", {"text": DE, "source": "de", "target": "fr",
                                          "beam_size": 3, "nbest": 2}),
    ("native auto", "/translate", {"texts": [EN[0], DE], "source": "auto", "target": "fr"}),
    ("native attention", "/translate", {"text": EN[0], "attention": True}),
    ("native sampling", "/translate", {"texts": EN, "sampling": {"temperature": 0.8,
                                                                 "seed": 7}, "nbest": 2}),
    ("native prefixes", "/translate", {"texts": EN[:2], "prefixes": ["Ein", ""]}),
    ("native bearer ok", "/translate", ({"text": EN[0]}, {"Authorization": f"Bearer {KEY}"})),
    ("lt json", "/translate", {"q": EN[0], **LT}),
    ("lt list", "/translate", {"q": EN, **LT}),
    ("lt alternatives", "/translate", {"q": EN[1], **LT, "alternatives": 2}),
    ("lt alternatives list", "/translate", {"q": EN, **LT, "alternatives": 3}),
    ("lt html", "/translate", {"q": f"<p>{EN[0]} <b>{EN[1]}</b></p><script>x()</script>",
                               **LT, "format": "html"}),
    ("lt auto", "/translate", {"q": [EN[2], DE], "source": "auto", "target": "fr"}),
    ("lt auto one", "/translate", {"q": DE, "source": "auto", "target": "fr"}),
    ("lt pivot", "/translate", {"q": DE, "source": "de", "target": "fr", "alternatives": 1}),
    ("lt glossary", "/translate", {"q": EN[0], **LT, "glossary": {"park": "Garten"}}),
    ("lt key", "/translate", {"q": EN[0], **LT, "api_key": KEY}),
    ("lt alias case", "/translate", {"q": EN[0], "source": "EN", "target": " de "}),
    ("lt form", "/translate", ("q=A+dog+runs.&source=en&target=de&alternatives=1",
                               "application/x-www-form-urlencoded")),
    ("lt form list", "/translate", ("q=A+dog.&q=A+cat.&source=en&target=fr",
                                    "application/x-www-form-urlencoded")),
    ("lt query", "/translate?q=A%20man%20sings.&source=en&target=de", ("", None)),
    ("languages", "/languages", None),
    ("languages post", "/languages", {"api_key": KEY}),
    ("detect", "/detect", {"q": DE}),
    ("detect form", "/detect", ("q=A+dog+runs+in+the+park.", "application/x-www-form-urlencoded")),
    ("frontend settings", "/frontend/settings", None),
    # errors: those of the hostile-input tests, then their kin
    ("error key list", "/translate", {"q": "A dog.", **LT, "api_key": []}),
    ("error key object", "/translate", {"q": "A dog.", **LT, "api_key": {"a": 1}}),
    ("error alternatives 1e400", "/translate",
     (b'{"q": "A dog.", "source": "en", "target": "de", "api_key": "k-1", '
      b'"alternatives": 1e400}', "application/json")),
    ("error alternatives true", "/translate", {"q": "A dog.", **LT, "alternatives": True}),
    ("error detect nested", "/detect", (b"[" * 200_000, "application/json")),
    ("error languages nested", "/languages", (b"[" * 200_000, "application/json")),
    ("error detect nan", "/detect", (b'{"q": NaN}', "application/json")),
    ("error surrogate", "/translate", {"q": "A dog \ud800 runs.", **LT}),
    ("error key wrong", "/translate", {"q": "A dog.", **LT, "api_key": "nope"}),
    ("error bearer wrong", "/translate", ({"text": EN[0]}, {"Authorization": "Bearer nope"})),
    ("error no q", "/translate", {"q": "", **LT}),
    ("error no target", "/translate", {"q": "A dog.", "source": "en"}),
    ("error pair", "/translate", {"q": "A dog.", "source": "en", "target": "cs"}),
    ("error pivot glossary", "/translate", {"q": DE, "source": "de", "target": "fr",
                                            "glossary": {"Hund": "chien"}}),
    ("error pivot html", "/translate", {"q": f"<p>{DE}</p>", "source": "de", "target": "fr",
                                        "format": "html"}),
    ("error format", "/translate", {"q": "A dog.", **LT, "format": "xml"}),
    ("error alternatives many", "/translate", {"q": "A dog.", **LT, "alternatives": 99}),
    ("error native unknown", "/translate", {"text": "A dog.", "beam": 3}),
    ("error native both", "/translate", {"text": "A dog.", "texts": ["A cat."]}),
    ("error native beam", "/translate", {"text": "A dog.", "beam_size": 99}),
    ("error native target both", "/translate", {"text": "A dog.", "target": "de",
                                                "tgt_lang": "fr"}),
    ("error native pivot prefix", "/translate", {"text": DE, "source": "de", "target": "fr",
                                                 "prefix": "Le"}),
    ("error native glossary sampling", "/translate",
     {"text": "A dog.", "glossary": {"dog": "Hund"}, "sampling": {"seed": 1}}),
    ("error native attention texts", "/translate", {"texts": ["A dog."], "attention": True}),
    ("error native source", "/translate", {"text": "A dog.", "source": 3}),
    ("error native media type", "/translate", (b'{"text": "A dog."}', "text/plain")),
    ("error native json", "/translate", (b'{"text": ', "application/json")),
    ("error native utf8", "/translate", (b'{"text": "\xff"}', "application/json")),
    ("error lt media type", "/translate", (b"q=a", "multipart/form-data; boundary=x")),
    ("error too many", "/translate", {"texts": ["a"] * 65}),
    ("error too long", "/translate", {"q": "a" * 2001, **LT}),
    ("error sampling field", "/translate", {"text": "a", "sampling": {"heat": 1}}),
    ("error no route", "/nowhere", None),
    ("error method", "/health", {"q": "a"}),
]

# The documents /translate_file is given, made here with each format's own library
PROSE = ["A dog runs in the park.", "Two men play football in the street.",
         "A woman reads a book."]
TEXTS = {
    "a.txt": "A dog\n\n" + "\n\n".join(PROSE) + "\n",
    "a.md": f"# A dog\n\n{PROSE[0]}\n\n{PROSE[1].replace('football', '*football*')}\n",
    "a.html": f"<html><body><h1>A dog</h1><p>{EN[0]} <i>{EN[1]}</i></p></body></html>",
    "a.htm": f"<p>{EN[2]}</p>",
    "a.srt": f"1\n00:00:01,000 --> 00:00:02,500\n{EN[0]}\n\n2\n00:00:03,000 --> "
             f"00:00:04,000\n{EN[1]}\n",
    "a.vtt": f"WEBVTT\n\n00:01.000 --> 00:02.500\n{EN[0]}\n\n00:03.000 --> 00:04.000\n{EN[2]}\n",
}
ODF = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
       'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
       'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"')


def opendocument(kind: str, body: str) -> bytes:
  """An OpenDocument package of `kind` (text, presentation) holding `body`."""
  out = io.BytesIO()
  with zipfile.ZipFile(out, "w") as z:
    z.writestr(zipfile.ZipInfo("mimetype"), f"application/vnd.oasis.opendocument.{kind}")
    z.writestr("content.xml", f'<?xml version="1.0" encoding="UTF-8"?><office:document-content '
                              f'{ODF} office:version="1.3"><office:body><office:{kind}>{body}'
                              f'</office:{kind}></office:body></office:document-content>')
  return out.getvalue()


def make_documents() -> dict[str, bytes]:
  """A document of every format /translate_file takes, and one it does not."""
  import docx
  import pptx
  from ebooklib import epub
  out = {name: text.encode() for name, text in TEXTS.items()}
  document = docx.Document()
  document.add_heading("A dog", 1)
  paragraph = document.add_paragraph(PROSE[0] + " ")
  paragraph.add_run(PROSE[1]).bold = True
  buffer = io.BytesIO()
  document.save(buffer)
  out["a.docx"] = buffer.getvalue()
  deck = pptx.Presentation()
  slide = deck.slides.add_slide(deck.slide_layouts[1])
  slide.shapes.title.text = "A dog"
  slide.placeholders[1].text = PROSE[2]
  buffer = io.BytesIO()
  deck.save(buffer)
  out["a.pptx"] = buffer.getvalue()
  book = epub.EpubBook()
  book.set_identifier("serve-identity")
  book.set_title("A dog")
  book.set_language("en")
  chapter = epub.EpubHtml(title="A dog", file_name="chapter.xhtml", lang="en")
  chapter.content = f"<h1>A dog</h1><p>{PROSE[0]}</p><p>{PROSE[1]}</p>"
  book.add_item(chapter)
  book.add_item(epub.EpubNcx())
  book.add_item(epub.EpubNav())
  book.spine = ["nav", chapter]
  buffer = io.BytesIO()
  epub.write_epub(buffer, book, {"mtime": datetime.datetime(2026, 1, 1)})
  out["a.epub"] = buffer.getvalue()
  out["a.odt"] = opendocument("text", f"<text:h>A dog</text:h><text:p>{PROSE[0]}</text:p>")
  out["a.odp"] = opendocument("presentation", "<draw:page><draw:frame><draw:text-box>"
                              f"<text:p>{EN[0]}</text:p><text:p>{EN[1]}</text:p>"
                              "</draw:text-box></draw:frame></draw:page>")
  out["a.pdf"] = b"%PDF-1.4 not translated here"
  return out


def call(url: str, path: str, body, headers: dict | None = None) -> dict:
  """{status, type, body} of one request (the body as text, or a digest past 4,000
  characters)."""
  headers = dict(headers or {})
  data = None
  if isinstance(body, tuple) and isinstance(body[0], dict):
    body, more = body
    headers.update(more)
  if isinstance(body, dict):
    data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
  elif isinstance(body, tuple):
    data = body[0].encode() if isinstance(body[0], str) else body[0]
    if body[1]:
      headers["Content-Type"] = body[1]
  request = urllib.request.Request(url + path, data=data, headers=headers,
                                   method="GET" if body is None else "POST")
  try:
    with urllib.request.urlopen(request, timeout=300) as r:
      status, kind, raw = r.status, r.headers.get("content-type"), r.read()
  except urllib.error.HTTPError as e:
    status, kind, raw = e.code, e.headers.get("content-type"), e.read()
  text = raw.decode("utf-8", "replace")
  return {"status": status, "type": kind,
          "body": text if len(text) <= 4000 else "sha256:" + hashlib.sha256(raw).hexdigest()}


def multipart(fields: dict[str, str], name: str, data: bytes) -> tuple[bytes, str]:
  boundary = "seq2seq-identity-boundary"
  parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
           for k, v in fields.items()]
  parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
               f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
               + data + b"\r\n")
  return b"".join(parts) + f"--{boundary}--\r\n".encode(), \
      f"multipart/form-data; boundary={boundary}"


def content(data: bytes) -> str:
  """A translated document by what it holds: a zip's members (names and bytes, not its
  dates), else its bytes."""
  if data[:2] == b"PK":
    with zipfile.ZipFile(io.BytesIO(data)) as z:
      digest = hashlib.sha256()
      for info in z.infolist():
        digest.update(info.filename.encode() + b"\0" + z.read(info) + b"\0")
      return "members:" + digest.hexdigest()
  return data.decode("utf-8", "replace")


def translate_file(url: str, name: str, data: bytes, fields: dict) -> dict:
  body, kind = multipart(fields, name, data)
  answer = call(url, "/translate_file", (body, kind))
  if answer["status"] == 200:
    link = json.loads(answer["body"])["translatedFileUrl"]
    with urllib.request.urlopen(link, timeout=60) as r:
      answer = {"status": 200, "file": content(r.read()),
                "disposition": r.headers.get("content-disposition")}
  return answer


def answers(workdir: str) -> dict:
  files = make_documents()
  with tempfile.TemporaryDirectory() as tmp:
    keys = Path(tmp) / "keys.txt"
    keys.write_text(f"{KEY}\n")
    proc, url = start_server("--workdir", workdir, "--api-keys", keys)
    try:
      out = {name: call(url, path, body) for name, path, body in REQUESTS}
      for name, data in files.items():
        out[f"{'error ' if name == 'a.pdf' else ''}file {name}"] = translate_file(
            url, name, data, LT)
      out["file auto"] = translate_file(url, "a.txt", files["a.txt"],
                                        {"source": "auto", "target": "de"})
      out["error file pivot"] = translate_file(url, "a.txt", files["a.txt"],
                                               {"source": "de", "target": "fr"})
      out["error file bad key"] = translate_file(url, "a.txt", files["a.txt"],
                                                 {**LT, "api_key": "nope"})
      out["error file no file"] = call(url, "/translate_file", multipart(LT, "", b""))
      out["error file malformed"] = translate_file(url, "b.docx", b"PK\x03\x04" + bytes(60),
                                                   LT)
    finally:
      stop_server(proc)
  return out


def compare(before: dict, after: dict, changed: tuple[str, ...] = ()) -> dict:
  """Prints each answer that differs; the figures, "identical" false where one differs
  that is not `changed` (the answers a change is meant to change, named on the command
  line)."""
  differ = [name for name in before if before[name] != after.get(name)]
  missing = sorted(set(after) ^ set(before))
  for name in differ:
    print(f"differs{' as meant' if name in changed else ''}: {name}\n"
          f"  before {json.dumps(before[name])[:400]}\n"
          f"  after  {json.dumps(after.get(name))[:400]}")
  if missing:
    print("in one file only:", ", ".join(missing))
  print(f"{len(before) - len(differ)} of {len(before)} answers the same, byte for byte"
        + (f"; {len(set(differ) & set(changed))} changed as meant" if changed else ""))
  return {"answers": len(before), "same": len(before) - len(differ),
          "changed_as_meant": sorted(set(differ) & set(changed)),
          "differ": sorted(set(differ) - set(changed)), "missing": missing,
          "identical": not (set(differ) - set(changed) or missing)}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", help="a run of several directions, English among them")
  p.add_argument("--out", help="write the answers here (JSON)")
  p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
  p.add_argument("--changed", nargs="*", default=(), metavar="NAME",
                 help="with --compare: answers the change is meant to change")
  add_results_flag(p)
  args = p.parse_args()
  if args.compare:
    figures = compare(*(json.loads(Path(f).read_text()) for f in args.compare),
                      tuple(args.changed))
    report(args.results, {"compared": args.compare, **figures})
    sys.exit(0 if figures["identical"] else 1)
  if not (args.workdir and args.out):
    p.error("give --workdir RUN and --out FILE, or --compare BEFORE AFTER")
  result = answers(args.workdir)
  Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False))
  print(f"{len(result)} answers written to {args.out}")
  statuses = {name: answer["status"] for name, answer in result.items()}
  report(args.results, {"answers": len(result), "statuses": statuses})


if __name__ == "__main__":
  main()
