"""Every fenced shell and Python example of README.md and docs/ runs, against the tiny run.

The examples name `runs/multi30k`, `runs/m30k`, `runs/mine`, ...: here each of those names
is one copy of the trained tiny run (its data folder holds the sample under Multi30k's
split names too), and the files the examples read (`in.en`, `test.en.gz`, `pairs.tsv`,
...) are written from data/sample. The blocks of one page run in order, in one folder, as
a user would type them: the export of one block is what the next block translates with.

What runs and what is checked only, by command:
- `python translate.py`, `evaluate.py`, `seq2seq-export`, `seq2seq-average`, the Python
  blocks: run, and must exit 0. They run in this process as tests/cli's tests do (their
  own argv, stdin, stdout and folder); what needs a shell, or the offline Hub's
  environment, runs in a shell.
- `curl`: run against `seq2seq-serve` started on the tiny run (the example's host and port
  replaced); the answer must be JSON with the fields the example's comment shows.
- `python train.py` / `seq2seq-train`: run with `--print-config`, which resolves the preset
  and every `--config.*` override and exits (a Multi30k hour or a Hub download is not run;
  training itself is what tests/training and the `trained_run` fixture run).
- `seq2seq-push`: run with `--dry-run` (what it would upload is staged, nothing is sent).
  The Hub model the docs name is that run published into a Hugging Face cache laid out as
  huggingface_hub lays out its own, read with HF_HUB_OFFLINE=1.
- `seq2seq-serve` and `libretranslate` (they would not return) and `python bench/*.py`
  (benchmarks of long runs): every flag must be one that the command's `--help` lists.
- Python blocks of Argos Translate: run by the Python of LibreTranslate's environment
  (`make libretranslate`), which has argostranslate, with every download refused.
- `pip install` and `make`: the extras, files and targets named must exist.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import SCRIPTS, in_process, run_cli
from helpers import ROOT, SAMPLE, lay_out_hub_cache
from serve_helpers import start_server, stop_server

PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(bash|python)\n(.*?)^```", re.S | re.M)
RUN_NAMES = ("multi30k", "m30k", "mine", "tiny", "m30k_ff1024")
BIN = Path(sys.executable).parent
HUB_MODEL = "your-name/multi30k-en-de"
# The pretrained model the docs import: a small OPUS-MT-style Marian model with random
# weights in the Hub's layout (foreign_models), in the same offline Hub cache.
PRETRAINED = "Helsinki-NLP/opus-mt-en-de"
HUB_NAMES = (HUB_MODEL, PRETRAINED)
LT_BIN = ROOT / ".venv-libretranslate" / "bin"  # LibreTranslate's and Argos's commands
CONSOLE_SCRIPTS = {name: target.split(":")[0] for name, target in tomllib.loads(
    (ROOT / "pyproject.toml").read_text())["project"]["scripts"].items()}


def examples(page: str) -> list[tuple[str, int, str]]:
  """(language, line number, code) of each fenced bash or Python block of a page."""
  text = (ROOT / page).read_text("utf-8")
  return [(m.group(1), text.count("\n", 0, m.start()) + 1, m.group(2))
          for m in FENCE.finditer(text)]


def commands(block: str) -> list[tuple[str, str]]:
  """(command, comment) of each of the block's shell commands, continuation lines joined;
  the comment is the comment line that follows a command (the answer a curl shows)."""
  found, current = [], ""
  for raw in block.splitlines():
    line = raw.strip()
    if not current and line.startswith("#"):
      if found and not found[-1][1]:
        found[-1] = (found[-1][0], line)
      continue
    if line.endswith("\\"):
      current += line.removesuffix("\\").strip() + " "
    elif current or line:
      found.append(((current + line).strip(), ""))
      current = ""
  return found


# ---------------------------------------------------------------------------- the folder


def sandbox_run(folder: Path, trained: Path, name: str, data: str, languages) -> Path:
  """A copy of a trained run as `runs/NAME`, reading the sample (under Multi30k's split
  names too) from `data`, with an averaged checkpoint."""
  corpus = folder / data
  corpus.mkdir()
  for lang in languages:
    for split, source in (("train", "train"), ("val", "val"), ("test", "test"),
                          ("test_2016_flickr", "test")):
      shutil.copy(SAMPLE / f"{source}.{lang}", corpus / f"{split}.{lang}")
  run = folder / "runs" / name
  shutil.copytree(trained, run)
  config = json.loads((run / "config.json").read_text())
  config["data"]["dir"] = str(corpus)
  (run / "config.json").write_text(json.dumps(config, indent=2))
  run_cli("-m", "seq2seq.cli.average", "--workdir", run, "--last", "2")
  return run


def write_sandbox(folder: Path, trained: Path, multilingual: Path) -> None:
  for name in ("train.py", "evaluate.py", "translate.py", "configs", "data", "bench"):
    (folder / name).symlink_to(ROOT / name)
  run = sandbox_run(folder, trained, "multi30k", "corpus_as_multi30k", ("en", "de"))
  for name in RUN_NAMES[1:]:  # relative links: a copy of the folder links to its own run
    (folder / "runs" / name).symlink_to(run.name)
  # `runs/m30k-ml`, a model of several directions: the tiny one (en-de, de-en, en-fr, fr-en)
  sandbox_run(folder, multilingual, "m30k-ml", "corpus_as_multi30k_ml", ("en", "de", "fr"))
  src, tgt = (SAMPLE / "test.en").read_text().splitlines(), (SAMPLE / "test.de").read_text().splitlines()
  for name, lines in (("in.en", src[:6]), ("mono.en", src[:6]), ("test.en", src[:12]),
                      ("test.de", tgt[:12])):
    (folder / name).write_text("\n".join(lines) + "\n")
  for name in ("test.en", "test.de"):
    with gzip.open(folder / f"{name}.gz", "wt", encoding="utf-8") as f:
      f.write((folder / name).read_text())
  import docx  # the document the README translates
  report = docx.Document()
  report.add_paragraph(" ".join(src[:3]))
  report.save(folder / "report.docx")
  pairs = "".join(f"{s}\t{t}\n" for s, t in zip(src, tgt, strict=True))
  for name in ("pairs.tsv", "corpus.tsv"):
    (folder / name).write_text(pairs)
  shutil.copytree(folder / "corpus_as_multi30k", folder / "my_in_domain_corpus")
  shutil.copy(ROOT / "configs" / "tiny.py", folder / "my_recipe.py")
  # The Hub model the docs name, published from the run into an offline Hub cache.
  from seq2seq.rundir import hub
  hub.stage(run, folder / "staged", HUB_MODEL, "averaged")
  lay_out_hub_cache(folder / "hf-cache", HUB_MODEL, folder / "staged")
  import foreign_models
  release = foreign_models.small_marian(folder / "scratch" / "opus-mt-en-de")
  foreign_models.huggingface_from_marian(release, folder / "scratch" / "hf")
  lay_out_hub_cache(folder / "hf-cache", PRETRAINED, folder / "scratch" / "hf")
  # the fine-tuning the docs show is resolved, not run: its run is the import's
  (folder / "runs" / "opus-mt-en-de-mine").symlink_to("opus-mt-en-de")
  (folder / "bin").mkdir()
  # `python` is this interpreter (a link would lose its virtual environment).
  (folder / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
  (folder / "bin" / "python").chmod(0o755)


@pytest.fixture(scope="module")
def sandbox_template(trained_run, trained_multilingual, tmp_path_factory):
  folder = tmp_path_factory.mktemp("sandbox")
  write_sandbox(folder, trained_run, trained_multilingual)
  return folder


@pytest.fixture
def sandbox(sandbox_template, tmp_path):
  """A folder of each page's own, copied from one template: one page's export is not the
  next page's."""
  folder = tmp_path / "sandbox"
  shutil.copytree(sandbox_template, folder, symlinks=True)
  return folder


@pytest.fixture(scope="module")
def server(trained_run):
  proc, url = start_server("--workdir", trained_run)
  yield url
  stop_server(proc)


# ------------------------------------------------------------------- one command each


def environment(folder: Path) -> dict:
  return {**os.environ, "PATH": f"{folder / 'bin'}:{BIN}:{os.environ['PATH']}:{LT_BIN}",
          "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(folder / "hf-cache")}


def in_libretranslate_venv(code: str, folder: Path, where: str) -> subprocess.CompletedProcess:
  """A Python block of Argos Translate: run by the Python of LibreTranslate's virtual
  environment (`make libretranslate`), which has argostranslate, with its data in
  `folder` and every download refused."""
  python = LT_BIN / "python"
  assert python.exists(), f"{where}: needs {python} (make libretranslate)"
  closed = "http://127.0.0.1:9"
  env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "http_proxy": closed,
         "https_proxy": closed, "ARGOS_PACKAGES_DIR": str(folder / "argos-packages")}
  return subprocess.run([python, "-c", code], cwd=folder, capture_output=True, text=True,
                        timeout=600, env=env)


def help_text(program: list[str], folder: Path, cache: dict = {}) -> str:  # noqa: B006
  key = " ".join(program)
  if key not in cache:
    proc = subprocess.run([*program, "--help"], cwd=folder, env=environment(folder),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{key} --help: {proc.stderr[-2000:]}"
    cache[key] = proc.stdout
  return cache[key]


def check_flags(words: list[str], program_len: int, folder: Path, where: str) -> None:
  text = help_text(words[:program_len], folder)
  unknown = [w.split("=")[0] for w in words[program_len:]
             if w.startswith("--") and not re.search(re.escape(w.split("=")[0]) + r"(?![\w-])", text)]
  assert not unknown, f"{where}: {' '.join(words[:program_len])} has no {unknown}"


def check_install(words: list[str], where: str) -> None:
  project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
  extras = project["optional-dependencies"]
  for w in words[2:]:
    if m := re.fullmatch(r"\.(?:\[(\w+)\])?", w):
      assert m.group(1) is None or m.group(1) in extras, f"{where}: no extra {m.group(1)}"
    elif not w.startswith("-"):
      assert (ROOT / w).exists(), f"{where}: no file {w}"


def run_curl(line: str, url: str, comment: str, folder: Path, where: str) -> None:
  line = re.sub(r"(http://)?localhost:8080", url, line).replace("curl ", "curl --fail ", 1)
  proc = subprocess.run(line, shell=True, cwd=folder, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, f"{where}: {line}: {proc.stderr}"
  assert proc.stdout, f"{where}: {line}: no answer"
  if not proc.stdout.startswith("{"):
    return  # /metrics: Prometheus' text format
  answer = json.loads(proc.stdout)
  # The comment after the command shows the answer's shape: its top-level field names.
  for field in top_level_fields(comment):
    assert field in answer, f"{where}: {line}: no {field!r} in {answer}"


def top_level_fields(shown: str) -> list[str]:
  """The names of the outermost object's fields in an answer shown as `# {"a": {"b": 1}}`."""
  fields, depth = [], 0
  for m in re.finditer(r'[{}\[\]]|"(\w+)":', shown):
    token = m.group()
    if token in "{[":
      depth += 1
    elif token in "}]":
      depth -= 1
    elif depth == 1 and shown.lstrip("# ").startswith("{"):
      fields.append(m.group(1))
  return fields


# What a command of the project runs in this process, as tests/cli's tests do: a Python
# process per example would import JAX and the package again and trace its programs again
# (most of this file's time). What the Hub model names (its environment is read at import),
# and what needs more of a shell than one `echo`/`printf` into the command and a `<` and
# `>` file (`&&`, `2>`, variables, a pipe into anything else), runs in a shell of its own.
SHELL_WORDS = {"|", ">", ">>", "<", "2>", "&&", "||", ";", "&"}
PRINTF_ESCAPES = {"\\\\": "\\", "\\t": "\t", "\\n": "\n"}


class InProcess(NamedTuple):
  module: str  # whose main() runs
  argv: list[str]
  stdin: bytes | None = None
  stdin_file: str | None = None  # `< FILE`, read from the command's folder
  stdout_file: str | None = None  # `> FILE`, written there


def in_this_process(words: list[str]) -> InProcess | None:
  """What `[echo TEXT | or printf 'TEXT' |] python SCRIPT ARGS [< IN] [> OUT]` (or
  `seq2seq-X` for `python SCRIPT`) runs, None for anything else."""
  stdin = None
  if words[:1] in (["echo"], ["printf"]) and words[2:3] == ["|"]:
    text = f"{words[1]}\n" if words[0] == "echo" else printf_text(words[1])
    if text is None:
      return None
    stdin, words = text.encode(), words[3:]
  files = {}
  while len(words) > 2 and words[-2] in ("<", ">") and words[-2] not in files:
    files[words[-2]], words = words[-1], words[:-2]
  if SHELL_WORDS & set(words) or any(n in w for w in words for n in HUB_NAMES) or any(
      "$" in w for w in words):
    return None
  if stdin is not None and "<" in files:
    return None
  if words[0] == "python" and len(words) > 1 and words[1] in SCRIPTS:
    module, argv = SCRIPTS[words[1]], words[1:]
  elif words[0] in CONSOLE_SCRIPTS:
    module, argv = CONSOLE_SCRIPTS[words[0]], words
  else:
    return None
  return InProcess(module, argv, stdin, files.get("<"), files.get(">"))


def printf_text(fmt: str) -> str | None:
  """What `printf FMT` prints for a format of text and \\t, \\n, \\\\ only; None otherwise."""
  if "%" in fmt:
    return None
  parts = re.split(r"(\\.)", fmt)
  if any(p.startswith("\\") and p not in PRINTF_ESCAPES for p in parts):
    return None
  return "".join(PRINTF_ESCAPES.get(p, p) for p in parts)


def run_command(line: str, words: list[str], folder: Path) -> subprocess.CompletedProcess:
  if found := in_this_process(words):
    stdin = (folder / found.stdin_file).read_bytes() if found.stdin_file else found.stdin
    proc = in_process(found.module, found.argv, stdin, cwd=folder)
    if found.stdout_file:
      (folder / found.stdout_file).write_bytes(proc.stdout)
      proc.stdout = b""
    return as_text(proc)
  return subprocess.run(line, shell=True, cwd=folder, env=environment(folder),
                        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)


def run_python(code: str, folder: Path, where: str) -> subprocess.CompletedProcess:
  """A Python block: in this process, as a script's `__main__`, unless it loads the Hub
  model."""
  if any(n in code for n in HUB_NAMES):
    return subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True,
                          text=True, timeout=600, env=environment(folder))
  program = compile(code, where, "exec")
  return as_text(in_process(lambda: exec(program, {"__name__": "__main__"}), [where], None,
                            cwd=folder))


def as_text(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
  """`in_process`'s result with its output decoded, as `subprocess.run(text=True)` gives it."""
  return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(),
                                     proc.stderr.decode())


def run_line(line: str, comment: str, folder: Path, server_url, where: str) -> None:
  words = shlex.split(line, comments=True)
  last = words[len(words) - words[::-1].index("|"):] if "|" in words else words
  while re.fullmatch(r"[A-Z_]+=\S*", last[0]):  # VAR=value before the program
    last = last[1:]
  program = last[:2] if last[0] == "python" else last[:1]
  if words[0] == "make":
    targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
    assert set(words[1:]) <= set(targets), f"{where}: no make target in {words}"
  elif words[:2] == ["pip", "install"]:
    check_install(words, where)
  elif program in (["python", "train.py"], ["seq2seq-train"], ["seq2seq-push"]):
    check = "--print-config" if program != ["seq2seq-push"] else "--dry-run"
    proc = run_command(shlex.join([*words, check]), [*words, check], folder)
    assert proc.returncode == 0, f"{where}: {line}:\n{proc.stderr[-2000:]}"
  elif program[0] in ("seq2seq-serve", "libretranslate") or program[-1].startswith("bench/"):
    check_flags(last, len(program), folder, where)
  elif words[0] == "curl":
    run_curl(line, server_url(), comment, folder, where)
  else:
    proc = run_command(line, words, folder)
    assert proc.returncode == 0, f"{where}: {line}:\n{proc.stderr[-3000:]}"


def test_the_pages_have_examples():
  """The parser finds what the pages hold (a fence it missed would go untested)."""
  fences = sum((ROOT / p).read_text("utf-8").count("\n```bash\n") +
               (ROOT / p).read_text("utf-8").count("\n```python\n") for p in PAGES)
  assert fences == sum(len(examples(p)) for p in PAGES) > 20


@pytest.mark.parametrize("page", PAGES)
def test_every_example_of_the_page_runs(page, sandbox, request):
  blocks = examples(page)
  if not blocks:
    pytest.skip(f"{page} has no shell or Python example")
  server = {}

  def server_url():
    if "url" not in server:
      server["url"] = request.getfixturevalue("server")
    return server["url"]

  for language, lineno, code in blocks:
    where = f"{page}:{lineno}"
    if language == "python" and "import argostranslate" in code:
      proc = in_libretranslate_venv(code, sandbox, where)
      assert proc.returncode == 0, f"{where}:\n{proc.stderr[-3000:]}"
      continue
    if language == "python":
      if "localhost:8080" in code:  # a client of the server: the one started here
        code = code.replace("http://localhost:8080", server_url())
      proc = run_python(code, sandbox, where)
      assert proc.returncode == 0, f"{where}:\n{proc.stderr[-3000:]}"
      continue
    for line, comment in commands(code):
      run_line(line, comment, sandbox, server_url, where)


def test_a_flag_the_command_does_not_have_fails_the_check():
  check_flags(["python", "bench/decode_speed.py", "--beam", "5"], 2, ROOT, "here")
  with pytest.raises(AssertionError, match="--beam-width"):
    check_flags(["python", "bench/decode_speed.py", "--beam-width", "5"], 2, ROOT, "here")


def test_the_fields_an_example_shows_are_read_at_the_top_level_only():
  assert top_level_fields('# {"a": 1, "b": {"c": [{"d": 2}]}, "e": "x"}') == ["a", "b", "e"]
  assert top_level_fields('# [{"code": "en"}]') == []


def test_a_failing_command_fails_in_this_process_as_in_a_shell(tmp_path):
  """What runs in this process fails as it would in a shell: an unknown flag (a usage
  error) and a Python block that raises."""
  line = 'echo "A dog." | python translate.py --no-such-flag'
  words = shlex.split(line)
  assert in_this_process(words)[:2] == ("seq2seq.cli.translate", ["translate.py", "--no-such-flag"])
  assert run_command(line, words, tmp_path).returncode == 2
  assert run_python("raise ValueError('no')", tmp_path, "here").returncode == 1


def test_printf_and_file_redirections_reach_the_command_as_in_a_shell(tmp_path):
  """`printf` into a command, `< FILE` and `> FILE` give it what a shell gives it."""
  lines = ["printf 'A\\tB\\n\\\\' | python evaluate.py", "python translate.py --x < in.txt > out.de",
           "printf 'A%sB' x | python translate.py", "python translate.py < a && echo b"]
  fmt = shlex.split(lines[0])[1]
  assert printf_text(fmt) == subprocess.run(f"printf {shlex.quote(fmt)}", shell=True,
                                            capture_output=True, text=True).stdout == "A\tB\n\\"
  found = in_this_process(shlex.split(lines[1]))
  assert (found.argv, found.stdin_file, found.stdout_file) == (["translate.py", "--x"], "in.txt",
                                                               "out.de")
  assert in_this_process(shlex.split(lines[2])) is None  # a format printf would expand
  assert in_this_process(shlex.split(lines[3])) is None  # `&&` needs a shell
  # `> FILE` gets what the command prints, and the shell-less run prints nothing itself.
  line = "python evaluate.py --help > help.txt"
  assert run_command(line, shlex.split(line), tmp_path).stdout == ""
  help_text = in_process(SCRIPTS["evaluate.py"], ["evaluate.py", "--help"], None).stdout
  assert (tmp_path / "help.txt").read_bytes() == help_text and b"--src" in help_text
