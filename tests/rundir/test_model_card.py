"""The run directory's README.md model card, written by training and updated by evaluation."""

import dataclasses
import hashlib
import json
from pathlib import Path

import jax

from seq2seq import Translator, __version__
from seq2seq.rundir import model_card, run_files
from seq2seq.training import metrics

from conftest import in_process, run_cli
from helpers import SAMPLE, tiny_config


def test_training_writes_a_card_that_matches_the_run(trained_run):
  card = (trained_run / "README.md").read_text()
  training = json.loads((trained_run / "training.json").read_text())
  last = [r for r in metrics.read(trained_run) if r["kind"] == "train"][-1]
  assert training["step"] == last["step"] == 300
  assert f"{training['step']:,} updates, {last['epoch']} epochs" in card
  cfg = run_files.load_config(trained_run)
  params = Translator.from_pretrained(trained_run).params
  count = sum(x.size for x in jax.tree_util.tree_leaves(params))
  assert f"parameters: {count:,}" in card
  assert f"vocabulary: {cfg.model.vocab_size:,} joint SentencePiece pieces" in card
  digest = hashlib.sha256((SAMPLE / "train.en").read_bytes()).hexdigest()
  lines = len((SAMPLE / "train.en").read_text().splitlines())
  assert f"train.en`: {lines:,} lines" in card and digest[:16] in card
  assert f"seq2seq {__version__}" in card and "machine: " in card


def test_evaluation_adds_a_row_with_its_settings_and_signature(trained_run):
  before = (trained_run / "README.md").read_text().count("nrefs:1|")
  proc = run_cli("evaluate.py", "--workdir", trained_run, "--split", "val", "--beam", "2",
                 "--alpha", "0.8")
  result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
  card = (trained_run / "README.md").read_text()
  assert card.count("nrefs:1|") == before + 1
  row = f"| val | best | 2 | 0.8 | {result['bleu']:.2f} | {result['chrf']:.2f} | `{result['bleu_signature']}` |"
  assert row in card
  assert json.loads((trained_run / "evaluations.jsonl").read_text().splitlines()[-1])["data"] == "val"


def test_card_names_subword_sampling_when_on(tmp_path):
  cfg = tiny_config(SAMPLE)
  for alpha in (0.0, 0.3):
    run = tmp_path / f"alpha{alpha}"
    run.mkdir()
    run_files.save_config(run, dataclasses.replace(cfg, data=dataclasses.replace(
        cfg.data, sampling_alpha=alpha)))
    card = model_card.render(run)  # a run that has not finished: only its settings
    assert ("subword sampling (alpha 0.3, n-best -1)" in card) == bool(alpha), card
    assert "dropout 0.1, label smoothing 0.1" in card


def test_training_ends_with_the_commands_that_use_the_run_and_they_run(trained_run):
  """The log's last lines give the commands for this run, the card's "Use" section the
  same for PATH, for the checkpoint the docs use ('averaged' where training averages);
  they work."""
  cfg = run_files.load_config(trained_run)
  name = "averaged" if cfg.train.average_last > 1 else "best"
  log = (trained_run / "train.log").read_text()
  logged = log.split("next: evaluate, translate, serve:\n")[1].splitlines()[:3]
  trained_in = Path(logged[0].split("--workdir ")[1].split()[0])  # the fixture copies it
  assert [line.strip() for line in logged] == model_card.next_commands(trained_in, cfg)
  commands = model_card.next_commands(Path("PATH"), cfg)
  assert all(f"--workdir PATH --checkpoint {name}" in c for c in commands)
  card = (trained_run / "README.md").read_text()
  assert "## Use\n\n```bash\n" + "\n".join(commands) + "\n```" in card
  translate = model_card.next_commands(trained_run, cfg)[1].split(" | ")[1]
  out = run_cli("-m", "seq2seq.cli.translate", *translate.split()[1:],
                input_bytes=b"A dog runs through the snow.\n")
  assert len(out.stdout.decode().splitlines()) == 1 and out.stdout.strip()


def _record_and_write(workdir: str, first: int, count: int) -> None:
  """An evaluation's writes, `count` times: its row appended, the card written."""
  for k in range(first, first + count):
    model_card.record_evaluation(Path(workdir), {
        "data": f"split{k}", "checkpoint": "best", "beam": 1, "alpha": 0.6, "bleu": float(k),
        "chrf": 1.0, "bleu_signature": "nrefs:1|test"})
    model_card.write(Path(workdir))


def _write_cards(workdir: str, count: int) -> None:
  """The trainer's last card, `count` times."""
  for _ in range(count):
    model_card.write(Path(workdir))


def test_evaluations_and_the_trainer_s_card_at_once_lose_nothing(trained_run, tmp_path):
  import multiprocessing
  import shutil
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  before = len(model_card.evaluations(run))
  context = multiprocessing.get_context("spawn")  # no JAX state shared with this process
  jobs = [context.Process(target=_record_and_write, args=(str(run), 0, 30)),
          context.Process(target=_record_and_write, args=(str(run), 100, 30)),
          context.Process(target=_write_cards, args=(str(run), 30))]
  for job in jobs:
    job.start()
  for job in jobs:
    job.join(timeout=300)
    assert job.exitcode == 0
  rows = model_card.evaluations(run)
  assert len(rows) == before + 60  # every row of both evaluations kept
  assert {r["data"] for r in rows[before:]} == {f"split{k}" for k in (*range(30),
                                                                      *range(100, 130))}
  # the card on disk is the one the records give: the later writer saw everything
  assert (run / model_card.CARD_FILE).read_text() == model_card.render(run)


def test_evaluation_leaves_the_run_directory_as_it_found_it_but_for_the_card(trained_run,
                                                                            tmp_path):
  import shutil
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  before = {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
  done = in_process("seq2seq.cli.evaluate", ["evaluate.py", "--workdir", str(run), "--split",
                                            "test", "--beam", "2"], None, cwd=tmp_path)
  assert done.returncode == 0, done.stderr.decode()[-2000:]
  after = {p.relative_to(run): p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
  changed = {p for p in after if before.get(p) != after[p]}
  assert changed <= {Path(model_card.EVALUATIONS_FILE), Path(model_card.CARD_FILE),
                     Path(model_card.CARD_LOCK_FILE)}
  assert (tmp_path / "hyps" / "run" / "test.beam2.txt").exists()
