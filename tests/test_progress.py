"""Progress of long jobs (seq2seq.runtime.Progress): a bar on a terminal, log lines with
the rate and the time left otherwise; and the jobs that show it."""

import io
import logging
import re
import time

from seq2seq import runtime

from helpers import SAMPLE, tiny_config


class Terminal(io.StringIO):
  def isatty(self):
    return True


def test_a_terminal_gets_a_bar_and_a_log_gets_lines_with_rate_and_time_left(caplog,
                                                                            monkeypatch):
  monkeypatch.setenv("SEQ2SEQ_PROGRESS_SECONDS", "0")  # a line at every update
  caplog.set_level(logging.INFO, logger="seq2seq.runtime")
  with runtime.Progress("cleaning", total=1000, unit="pairs", stream=io.StringIO()) as p:
    p.update(250)
    p.update(250)
  lines = [r.getMessage() for r in caplog.records]
  assert re.fullmatch(r"cleaning: 250 of 1,000 pairs \(25 %\), [\d,.]+ pairs/s, \d+ s left",
                      lines[0])
  assert lines[1].startswith("cleaning: 500 of 1,000 pairs (50 %)")
  assert re.fullmatch(r"cleaning: 500 pairs in \d+ s \([\d,.]+ pairs/s\)", lines[-1])

  caplog.clear()
  terminal = Terminal()
  with runtime.Progress("cleaning", total=1000, unit="pairs", stream=terminal) as p:
    time.sleep(0.2)  # tqdm redraws at most every 0.1 s
    p.update(500)
  assert "cleaning" in terminal.getvalue() and "500/1000" in terminal.getvalue()
  assert [r.getMessage() for r in caplog.records] == [caplog.records[0].getMessage()]
  assert caplog.records[0].getMessage().startswith("cleaning: 500 pairs in")


def test_lines_come_every_so_many_seconds_not_at_every_update(caplog, monkeypatch):
  monkeypatch.setenv("SEQ2SEQ_PROGRESS_SECONDS", "3600")
  caplog.set_level(logging.INFO, logger="seq2seq.runtime")
  with runtime.Progress("encoding", total=100, unit="pairs", stream=io.StringIO()) as p:
    for _ in range(100):
      p.update()
  assert len(caplog.records) == 2  # the first update, then the end


def test_preparing_a_run_shows_cleaning_sentencepiece_and_encoding(caplog, monkeypatch,
                                                                  tmp_path):
  from seq2seq.data import corpus
  monkeypatch.setenv("SEQ2SEQ_PROGRESS_SECONDS", "0")
  caplog.set_level(logging.INFO)
  corpus.prepare(tiny_config(SAMPLE), tmp_path)
  text = "\n".join(r.getMessage() for r in caplog.records)
  assert re.search(r"cleaning the training pairs: 500 of 500 pairs \(100 %\)", text)
  assert re.search(r"SentencePiece: reading sentences: 1,000 sentences in", text)
  assert "SentencePiece: trained in" in text
  assert re.search(r"encoding into pieces: 500 pairs in", text)
