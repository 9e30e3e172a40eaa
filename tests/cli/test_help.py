"""The command lines' help: each default said once, units on the server's limits, and a
preset's resolved config printed without training."""

import json
import re

import pytest

from seq2seq.cli import average, evaluate, export, serve, train, translate


@pytest.mark.parametrize("main", [translate.main, evaluate.main, serve.main, export.main,
                                  average.main])
def test_help_says_each_default_once_and_never_none(main, capsys):
  with pytest.raises(SystemExit) as e:
    main(["--help"])
  assert e.value.code == 0
  text = " ".join(capsys.readouterr().out.split())
  assert "(default: None)" not in text
  # a help text that names its default gets no second one from argparse
  assert not re.search(r"default[^()]*\([^()]*\) \(default: ", text), text
  if main is serve.main:
    assert "limit: bytes of a request body (default: 1000000)" in text
    assert "limit: seconds after which an unanswered request gets 503" in text


def test_print_config_resolves_a_preset_with_overrides_without_training(capsys, tmp_path):
  train.main(["train.py", "--config", "tiny", "--print-config",
              "--config.train.max_steps=7", "--config.model.d_model=32"])
  cfg = json.loads(capsys.readouterr().out)
  assert cfg["train"]["max_steps"] == 7 and cfg["model"]["d_model"] == 32
  with pytest.raises(SystemExit):
    train.main(["train.py", "--config", "tiny", "--print-config", "--config.train.nope=1"])
  assert "nope" in capsys.readouterr().err
