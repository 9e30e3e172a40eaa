"""`seq2seq-push`: publish a run to the Hugging Face Hub (`seq2seq.rundir.hub`).

    seq2seq-push --workdir RUN --repo ORG/NAME [--checkpoint averaged] [--dry-run]
"""

from __future__ import annotations

import argparse
import sys

from seq2seq.cli import parsing
from seq2seq.rundir import checkpoint, hub


def main(argv=None) -> None:
  from seq2seq.runtime import setup_cli_logging

  parser = argparse.ArgumentParser(
      description="Publish a trained run to the Hugging Face Hub as a model repository: "
      "config, SentencePiece model, one checkpoint, evaluations and a model card whose "
      "metadata the Hub reads. Loads back with Translator.from_pretrained(ORG/NAME) or "
      "--model ORG/NAME. The token is huggingface_hub's (hf auth login, HF_TOKEN).",
      formatter_class=parsing.HelpFormatter)
  parser.add_argument("--workdir", required=True, help="run directory written by train.py")
  parser.add_argument("--repo", required=True, metavar="ORG/NAME",
                      help="the Hub model repository (created if missing)")
  parser.add_argument("--checkpoint", default="averaged", choices=checkpoint.KINDS,
                      help="the checkpoint to publish (one per repository)")
  parser.add_argument("--license", help="the model's license, as the Hub names licenses "
                      "(e.g. apache-2.0, cc-by-4.0); default: unknown")
  parser.add_argument("--dataset", action="append", metavar="HUB_ID",
                      help="a Hub data set it was trained on, for the card (default: the "
                      "run's data.hub, if any); several times for several")
  parser.add_argument("--private", action="store_true",
                      help="make the repository private (an existing one too)")
  parser.add_argument("--branch", help="upload to this branch, made from main if missing "
                      "(default: main)")
  parser.add_argument("--dry-run", action="store_true",
                      help="print the files and the model card, upload nothing")
  args = parser.parse_args(argv)
  setup_cli_logging()
  try:
    files, card = hub.push(args.workdir, args.repo, args.checkpoint, args.license,
                           args.dataset, args.private, args.branch, args.dry_run)
  except (hub.HubError, checkpoint.CheckpointError) as e:
    sys.exit(f"error: {e}")
  except OSError as e:  # huggingface_hub's HTTP errors, a missing token
    sys.exit(f"error: pushing to {args.repo}: {checkpoint.first_line(e)}")
  if args.dry_run:
    print("\n".join(files))
    print("\n" + card)
  else:
    print(f"https://huggingface.co/{args.repo}")


if __name__ == "__main__":
  main()
