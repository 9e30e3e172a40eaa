"""translate.py as a user runs it: the API's translations, one output line per input
line, bad input handled line by line, usage errors in one line."""

import queue
import shutil
import subprocess
import sys
import threading

import pytest

from seq2seq.data import tokenizer
from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.translator import Translator, one_line

from conftest import run_cli
from helpers import ROOT, SAMPLE


def test_bad_input_is_handled_line_by_line(trained_run):
  long_line = " ".join(["A young man is running in the park."] * 40)  # > 128 pieces
  lines = [b"A young man is running in the park.", b"", b"   ", long_line.encode(),
           b"Two dogs \xff\xfe are playing.", b"A girl \x01\x07 is \xf0\x9f\x90\x95 sitting.",
           b"A woman\r", b"\xe2\x80\xa8 A boy \xe2\x80\xa8"]
  proc = run_cli("translate.py", "--workdir", trained_run, "--beam", "2",
                 input_bytes=b"\n".join(lines) + b"\n")
  out = proc.stdout.decode("utf-8").split("\n")
  assert out[-1] == "" and len(out) - 1 == len(lines)
  # The same translations as the Python API on the same (decoded) lines.
  texts = [line.decode("utf-8", errors="replace").rstrip("\r") for line in lines]
  api = Translator.load(trained_run).translate(texts, beam_size=2)
  assert out[:-1] == [one_line(t) for t in api]
  assert out[1] == "" and out[2] == ""
  assert all(out[i].strip() for i in (0, 3, 4, 5, 6, 7))
  err = proc.stderr.decode()
  assert "maximum" not in err  # the long line: its 40 sentences translated, none cut
  assert out[3].count(".") >= 20
  assert "input line 5: invalid UTF-8 replaced" in err
  assert f"translating: {len(lines)} sentences in" in err  # the progress line at the end

  strict = run_cli("translate.py", "--workdir", trained_run, "--strict",
                   input_bytes=b"\n".join(lines) + b"\n", check=False)
  assert strict.returncode != 0 and b"input line 5: not valid UTF-8" in strict.stderr
  assert strict.stdout == b""

  # Read in parts (2 lines at a time), an error still names the line in the input; a
  # line of NUL bytes has no pieces and translates to an empty line, as a blank one does.
  parts = [lines[0], b"\x00\x00\x00", lines[0], long_line.encode()]
  proc = run_cli("translate.py", "--workdir", trained_run, "--batch-size", "2", "--buffer",
                 "1", input_bytes=b"\n".join(parts) + b"\n")
  out = proc.stdout.decode("utf-8").split("\n")
  assert len(out) - 1 == 4 and out[1] == "" and out[0] == out[2] != "" and out[3]
  unsplittable = parts[:3] + [b"x" * 600]
  proc = run_cli("translate.py", "--workdir", trained_run, "--batch-size", "2", "--buffer",
                 "1", input_bytes=b"\n".join(unsplittable) + b"\n", check=False)
  assert proc.returncode != 0 and b"text 4: 'xxx" in proc.stderr
  assert b"no white space to cut at" in proc.stderr


def test_files_nbest_and_attention_plot(trained_run, tmp_path):
  src = tmp_path / "in.en"
  src.write_text("A dog is running.\nTwo women are sitting on a bench.\n", "utf-8")
  run_cli("translate.py", "--workdir", trained_run, "--input", src, "--output",
          tmp_path / "out.de", "--beam", "3", "--nbest", "3", "--checkpoint", "latest")
  rows = (tmp_path / "out.de").read_text("utf-8").splitlines()
  assert [r.split(" ||| ")[0] for r in rows] == ["0"] * 3 + ["1"] * 3  # fairseq/Marian
  api = Translator.load(trained_run, "latest").translate(src.read_text("utf-8").splitlines(),
                                                         beam_size=3, nbest=3)
  assert [r.split(" ||| ")[1] for r in rows] == [h.text for hyps in api for h in hyps]
  scores = [float(r.split(" ||| ")[2]) for r in rows[:3]]
  assert scores == sorted(scores, reverse=True)
  png = tmp_path / "attention.png"
  proc = run_cli("translate.py", "--workdir", trained_run, "--attention-plot", png,
                 input_bytes=b"A dog is running.\n")
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and proc.stdout.decode().strip()


def test_interactive_translates_each_line(trained_run):
  proc = run_cli("translate.py", "--workdir", trained_run, "--interactive",
                 input_bytes=b"A dog is running.\n\nA man is sitting.\n")
  api = Translator.load(trained_run).translate(["A dog is running.", "", "A man is sitting."])
  assert proc.stdout.decode().split("\n") == api + [""]


def test_the_first_batch_is_written_before_the_rest_is_read(trained_run):
  # The first batch's lines come out while the input is still open: a user sees output
  # after one search, not after --buffer batches are read, sorted and searched.
  lines = read_lines(SAMPLE / "test.en")[:7]
  proc = subprocess.Popen([sys.executable, "translate.py", "--workdir", str(trained_run),
                           "--batch-size", "4"], cwd=ROOT, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
  got = queue.Queue()
  threading.Thread(target=lambda: [got.put(line) for line in proc.stdout], daemon=True).start()
  try:
    proc.stdin.write("".join(line + "\n" for line in lines[:4]).encode())
    proc.stdin.flush()
    first = [got.get(timeout=300).decode().rstrip("\n") for _ in range(4)]
    proc.stdin.write("".join(line + "\n" for line in lines[4:]).encode())
    proc.stdin.close()
    assert proc.wait(timeout=300) == 0
  finally:
    proc.kill()
  rest = [got.get(timeout=10).decode().rstrip("\n") for _ in range(3)]
  assert first + rest == Translator.load(trained_run).translate(lines)


def test_mismatched_tokenizer_is_refused(trained_run, tmp_path):
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  lines = read_lines(SAMPLE / "train.en") + read_lines(SAMPLE / "train.de")
  (run / "spm.model").write_bytes(tokenizer.train(lines, vocab_size=350).model_proto)
  proc = run_cli("translate.py", "--workdir", run, input_bytes=b"A dog.\n", check=False)
  assert proc.returncode != 0
  assert b"tokenizer has 350 pieces but the model's embedding has 400 rows" in proc.stderr
  with pytest.raises(ValueError, match="does not belong to this checkpoint"):
    Translator.load(run)


def test_not_a_run_directory(tmp_path):
  proc = run_cli("translate.py", "--workdir", tmp_path, input_bytes=b"A dog.\n", check=False)
  assert proc.returncode != 0 and b"not a run directory" in proc.stderr


@pytest.mark.parametrize("args,message", [
    (["--beam", "0"], "--beam must be at least 1"),
    (["--nbest", "3"], "--nbest 3 needs a beam of at least 3"),
    (["--beam", "2", "--nbest", "3"], "add --beam 3 or more"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--ct2-threads", "fast"], "--ct2-threads must be throughput, latency or INTERxINTRA"),
])
def test_usage_errors_are_one_line_with_status_2(trained_run, args, message):
  proc = run_cli("translate.py", "--workdir", trained_run, *args, input_bytes=b"A dog.\n",
                 check=False)
  assert proc.returncode == 2
  err = proc.stderr.decode().strip().splitlines()
  assert message in err[-1] and "Traceback" not in proc.stderr.decode()


def test_api_takes_a_string_or_a_list(trained_run):
  t = Translator.load(trained_run)
  one = t.translate("A dog is running.")
  assert isinstance(one, str) and one == t.translate(["A dog is running."])[0]
  with pytest.raises(ValueError, match=r"beam size must be an integer of at least 1, got 0"):
    t.translate("A dog.", beam_size=0)
