"""`--config auto` (seq2seq/training/auto_recipe.py): the plan follows its rules, gives the
hand recipe back at its own point, keeps given fields, and times the trainer's update."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from seq2seq import recipes
from seq2seq.config import default_config
from seq2seq.data.input_pipeline import Batch, rows_for
from seq2seq.model.transformer import Model
from seq2seq.training import auto_recipe
from seq2seq.training.train_step import DataParallelSteps

from helpers import SAMPLE, tiny_config

pytestmark = pytest.mark.slow  # reads the corpus, compiles the update


def measured(pairs, minutes, updates_wanted=None, chars=71.0, long_chars=197.5):
  """Measurements whose timed update makes `minutes` buy `updates_wanted` compact updates
  (no compiling), with Multi30k's lengths by default."""
  update = 0.3
  if updates_wanted:
    update = minutes * 60 / updates_wanted / auto_recipe.UPDATE_FACTOR
  return auto_recipe.Measurements(pairs, chars, minutes, update, long_pair_chars=long_chars)


@pytest.mark.parametrize("long_chars, pieces", [(0.0, 0), (197.5, 48), (30.0, 16),
                                                (180.0, 48), (5000.0, 100)])
def test_packed_rows_hold_the_long_pairs(long_chars, pieces):
  """Rows of the pieces of a long pair (4.4 characters each, its end included), rounded up
  to 8, within 16-100; no measured length: length buckets."""
  m = measured(29_000, 60, 10_000, long_chars=long_chars)
  assert auto_recipe.plan(m)[0]["data.pack_length"] == pieces


def test_a_packed_run_is_planned_with_the_packed_factors():
  bucketed = measured(29_000, 10, 1_000)
  packed = dataclasses.replace(bucketed, pack_length=48)
  ratio = auto_recipe.UPDATE_FACTOR / auto_recipe.PACKED_UPDATE_FACTOR
  assert auto_recipe.estimated_updates(packed, "compact", 2048) == pytest.approx(
      1_000 * ratio, abs=1)


def test_compiling_costs_the_plan_updates_in_proportion():
  fast = measured(29_000, 10, 1_000)
  slow = dataclasses.replace(fast, compile_seconds=10.0, buckets=12)
  lost = auto_recipe.COMPILE_SHARE * 10.0 * 12
  assert auto_recipe.estimated_updates(fast, "compact", 2048) == pytest.approx(1_000, abs=1)
  assert auto_recipe.estimated_updates(slow, "compact", 2048) == pytest.approx(
      1_000 * (600 - lost) / 600, abs=1)


def test_the_plan_gives_the_hand_recipe_back_at_its_own_point():
  """29,000 pairs and an hour that buys ~10,000 updates: configs/multi30k.py's settings."""
  choices, reasons = auto_recipe.plan(measured(29_000, 60, 10_000))
  assert set(choices) == set(reasons)
  module, _ = recipes.load_config_module("multi30k")
  hand = module.get_config()
  differ = {}
  for name, value in choices.items():
    section, field = name.split(".")
    if hand[section][field] != value:
      differ[name] = (hand[section][field], value)
  # the same but for when it validates and the (unreachable) step limit
  assert set(differ) == {"train.eval_every", "train.max_steps"}, differ


@pytest.mark.parametrize("pairs, minutes, updates, expect", [
    (10_000, 10, 1_300, {"model.vocab_size": 5000, "model.dropout": 0.2,
                         "train.dropout_ramp_steps": 3000, "train.warmup_steps": 250,
                         "train.checkpoint_every": 100}),
    (29_000, 10, 1_300, {"model.vocab_size": 8000, "model.dropout": 0.2}),
    (1_000_000, 600, 200_000, {"model.d_model": 256, "model.vocab_size": 32_000,
                              "model.dropout": 0.1,
                              "data.sampling_alpha": 0.0, "data.max_tokens": 4096}),
    (5_000_000, 6000, 5_000_000, {"model.d_model": 512, "train.warmup_steps": 4000}),
])
def test_the_plan_follows_size_and_time(pairs, minutes, updates, expect):
  choices, _ = auto_recipe.plan(measured(pairs, minutes, updates))
  assert {k: choices[k] for k in expect} == expect


def test_given_fields_are_kept_and_a_resumed_run_reuses_its_plan(tmp_path, monkeypatch):
  monkeypatch.setattr(auto_recipe, "time_update", lambda cfg, length: (0.3, 5.0))
  cfg = default_config("compact")
  cfg.data.dir = str(SAMPLE)
  cfg.model.dropout = 0.3
  auto_recipe.complete(cfg, {"model.dropout"}, tmp_path)
  plan = json.loads((tmp_path / auto_recipe.PLAN_FILE).read_text())
  assert cfg.model.dropout == 0.3 and plan["measurements"]["pairs"] == 500
  assert plan["measurements"]["update_seconds"] == 0.3
  # the sample's few words cap the vocabulary (SentencePiece could not make 2,000 pieces)
  assert cfg.model.vocab_size == plan["choices"]["model.vocab_size"] < 2000
  monkeypatch.setattr(auto_recipe, "time_update", lambda *a: pytest.fail("measured again"))
  again = default_config("compact")
  again.data.dir = str(SAMPLE)
  auto_recipe.complete(again, set(), tmp_path)
  assert again.train.warmup_steps == cfg.train.warmup_steps
  assert again.model.dropout == plan["choices"]["model.dropout"] != 0.3


def test_several_directions_are_planned_by_their_pairs_and_languages(tmp_path, monkeypatch):
  """Multi30k's six directions: 174,000 pairs, but 4 x 29,000 distinct sentences size the
  vocabulary (two languages' 58,000 gave 8,000); validation ~1,200 sentences in all."""
  six = dataclasses.replace(measured(174_000, 60, 10_000), directions=6, sentences=116_000)
  choices, _ = auto_recipe.plan(six)
  assert choices["model.vocab_size"] == 11_000 and choices["train.eval_max_sentences"] == 200
  assert auto_recipe.plan(measured(29_000, 60, 10_000))[0]["train.eval_max_sentences"] == 0
  monkeypatch.setattr(auto_recipe, "time_update", lambda cfg, length: (0.3, 5.0))
  cfg = default_config("compact")
  cfg.data.dir = str(SAMPLE)
  cfg.data.directions = "en-de,de-en,en-fr"
  auto_recipe.complete(cfg, set(), tmp_path)
  m = json.loads((tmp_path / auto_recipe.PLAN_FILE).read_text())["measurements"]
  assert (m["pairs"], m["directions"], m["sentences"]) == (1500, 3, 1500)
  assert cfg.train.eval_max_sentences == 400


@pytest.mark.parametrize("packed", [False, True], ids=["buckets", "packed"])
def test_the_timed_update_is_the_program_the_run_trains_with(packed):
  """`time_update` compiles and runs the trainer's own update for its batch shape (with
  `data.pack_length`, the packed batch, segment ids and all): an update of a real batch
  of that shape afterwards compiles nothing."""
  cfg = tiny_config(SAMPLE)
  if packed:
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, pack_length=24))
  seconds, compiling = auto_recipe.time_update(cfg, 24, rounds=2)
  assert seconds > 0 and compiling > 0
  steps = DataParallelSteps(cfg, Model(cfg.model))
  rows = rows_for(24, cfg.data.max_tokens, steps.num_devices)
  src = np.full((rows, 24), 5, np.int32)
  segments = np.repeat(np.arange(1, 4), 8)[None].repeat(rows, 0).astype(np.int32)
  batch = lambda n: Batch(src[:, :n], src[:, :n],
                          *((segments[:, :n], segments[:, :n]) if packed else ()))
  state = steps.init_state()
  events = []
  record = lambda name, seconds, **kw: events.append(name)
  jax.monitoring.register_event_duration_secs_listener(record)
  try:
    state, metrics = steps.update(state, [batch(24)])
    assert np.isfinite(float(metrics["loss"]))
    # the control: the same update for another shape compiles
    assert "/jax/core/compile/backend_compile_duration" not in events, events
    steps.update(state, [batch(16)])
    assert "/jax/core/compile/backend_compile_duration" in events
  finally:
    jax.monitoring.unregister_event_duration_listener(record)
