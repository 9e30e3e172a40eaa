"""metrics.jsonl (one JSON object per log step and per validation) and its PNG plot."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from seq2seq.runtime import write_atomic

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "curves.png"


TENSORBOARD_DIR = "tensorboard"
# Numbers of a record that become TensorBoard scalars, as KIND/NAME.
_SCALARS = ("loss", "accuracy", "lr", "grad_norm", "tgt_tokens_per_s", "bleu")


class MetricsWriter:
  """Appends records to metrics.jsonl and, with `tensorboard=True`, to TensorBoard event
  files in WORKDIR/tensorboard (tensorboardX: `pip install 'seq2seq-haiku[tensorboard]'`).
  With `active=False` (every process of a cluster but the first) it writes nothing."""

  def __init__(self, workdir: str | os.PathLike, tensorboard: bool = False,
               active: bool = True):
    self.path = Path(workdir) / METRICS_FILE
    self.tb, self.active = None, active
    if tensorboard and active:
      try:
        from tensorboardX import SummaryWriter
      except ImportError as e:
        raise ImportError("train.tensorboard=True needs tensorboardX: "
                          "pip install 'seq2seq-haiku[tensorboard]'") from e
      self.tb = SummaryWriter(str(Path(workdir) / TENSORBOARD_DIR))

  def write(self, record: dict[str, Any]) -> None:
    if not self.active:
      return
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    if self.tb is not None:
      for name in _SCALARS:
        if name in record:
          self.tb.add_scalar(f"{record['kind']}/{name}", record[name], record["step"])
      self.tb.flush()

  def write_text(self, tag: str, text: str, step: int) -> None:
    """Markdown text (e.g. validation translations) for TensorBoard's Text tab."""
    if self.tb is not None:
      self.tb.add_text(tag, text, step)
      self.tb.flush()

  def close(self) -> None:
    if self.tb is not None:
      self.tb.close()


def read(workdir: str | os.PathLike) -> list[dict[str, Any]]:
  path = Path(workdir) / METRICS_FILE
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def truncate_after(workdir: str | os.PathLike, step: int) -> None:
  """Drops records past `step` (written after the checkpoint a run resumes from)."""
  records = read(workdir)
  kept = [r for r in records if r.get("step", 0) <= step]
  if len(kept) != len(records):
    write_atomic(Path(workdir) / METRICS_FILE, "".join(json.dumps(r) + "\n" for r in kept))


def plot(workdir: str | os.PathLike) -> Path:
  """Training/validation loss and validation BLEU against steps, written to curves.png."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  records = read(workdir)
  train = [r for r in records if r["kind"] == "train"]
  val = [r for r in records if r["kind"] == "val"]
  fig, ax = plt.subplots(figsize=(8, 4.5))
  ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
  ax.plot([r["step"] for r in val], [r["loss"] for r in val], "o-", label="val loss")
  ax.set_xlabel("step")
  ax.set_ylabel("label-smoothed cross entropy")
  ax2 = ax.twinx()
  ax2.plot([r["step"] for r in val], [r["bleu"] for r in val], "s-", color="tab:green",
           label="val BLEU")
  ax2.set_ylabel("sacreBLEU")
  lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
  labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
  ax.legend(lines, labels, loc="center right")
  ax.set_title(Path(workdir).name)
  fig.tight_layout()
  out = Path(workdir) / PLOT_FILE
  fig.savefig(out, dpi=100)
  plt.close(fig)
  return out
