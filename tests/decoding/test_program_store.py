"""The program store: a program loaded from it computes what the traced one computed,
without tracing; its file names separate whatever computes differently; a damaged file is
traced again; a new process translating what an earlier one translated loads every
search it runs; and beyond its limit the store lets go of the least recently used
program, which is built again, computing the same, when it is needed."""

import logging
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

from seq2seq import Translator
from seq2seq.data.textfiles import read_lines
from seq2seq.decoding import program_store, programs
from seq2seq.decoding.program_store import SUFFIX, StoredPrograms

from conftest import run_cli, xla_flags
from helpers import ROOT, SAMPLE


def stored(folder, identity="tanh-power"):
  """A StoredPrograms of a small function with a static argument, and its trace count."""
  traces = []

  def f(w, x, bias=None, *, power):
    traces.append(power)
    y = jnp.tanh(x @ w) ** power
    return y if bias is None else y + bias

  return StoredPrograms(f, identity, ("power",), folder), traces, f


def arrays(rows=3):
  rng = np.random.default_rng(0)
  return rng.normal(size=(4, 5)).astype(np.float32), rng.normal(size=(rows, 4)).astype(np.float32)


def files(folder):
  return sorted(folder.glob(f"*{SUFFIX}"))


def test_a_program_from_the_store_computes_what_the_traced_one_did_without_tracing(tmp_path):
  w, x = arrays()
  first, traces, f = stored(tmp_path)
  out = np.asarray(first(w, x, power=2))
  assert first.traced == 1 and traces == [2] and len(files(tmp_path)) == 1
  np.testing.assert_array_equal(out, jax.jit(f, static_argnames="power")(w, x, power=2))
  first(w, x, power=2)  # built once per process
  assert first.traced == 1 and traces == [2]

  again, traces_again, _ = stored(tmp_path)  # as a new process makes it
  np.testing.assert_array_equal(again(w, x, power=2), out)
  assert (again.loaded, again.traced, traces_again) == (1, 0, [])
  assert again.lower(w, x, power=2).compile()(w, x).shape == out.shape


def test_what_computes_differently_gets_a_file_of_its_own(tmp_path, monkeypatch):
  w, x = arrays()
  store, traces, _ = stored(tmp_path)
  store(w, x, power=2)
  store(w, x, power=3)  # another static setting
  store(w, arrays(rows=6)[1], power=2)  # another shape
  store(w, x, np.float32(1), power=2)  # another argument tree
  other, _, _ = stored(tmp_path, identity="another model")
  other(w, x, power=2)
  assert store.traced == 4 and other.traced == 1 and len(files(tmp_path)) == 5
  monkeypatch.setattr(program_store, "code_fingerprint", lambda: "the package changed")
  changed, _, _ = stored(tmp_path)
  changed(w, x, power=2)
  assert (changed.loaded, changed.traced) == (0, 1) and len(files(tmp_path)) == 6


def test_a_damaged_file_is_traced_again_and_replaced(tmp_path, caplog):
  w, x = arrays()
  first, _, _ = stored(tmp_path)
  out = np.asarray(first(w, x, power=2))
  [path] = files(tmp_path)
  path.write_bytes(path.read_bytes()[:100])
  again, _, _ = stored(tmp_path)
  with caplog.at_level(logging.WARNING, logger=program_store.__name__):
    np.testing.assert_array_equal(again(w, x, power=2), out)
  assert again.traced == 1 and "could not be read" in caplog.text and str(path) in caplog.text
  third, _, _ = stored(tmp_path)
  third(w, x, power=2)
  assert (third.loaded, third.traced) == (1, 0)


def test_beyond_its_limit_the_least_recently_used_program_is_dropped_and_built_again(
    tmp_path):
  w, _ = arrays()
  inputs = {rows: arrays(rows)[1] for rows in (1, 2, 3)}
  built = []
  store = StoredPrograms(stored(None)[2], "tanh-power", ("power",), tmp_path,
                         on_build=lambda: built.append(1), limit=2)
  first = {rows: np.asarray(store(w, x, power=2)) for rows, x in inputs.items()}
  assert (len(built), store.dropped) == (3, 1)  # rows 1, the least recently used, went
  kept = [e.program is not None for e in store.entries.values()]
  assert kept == [False, True, True]
  store(w, inputs[3], power=2)  # kept: nothing built
  assert len(built) == 3
  np.testing.assert_array_equal(store(w, inputs[1], power=2), first[1])  # built again
  assert (len(built), store.dropped, store.traced, store.loaded) == (4, 2, 3, 1)
  assert [e.program is not None for e in store.entries.values()] == [False, True, True]
  store.limit = 0  # all kept
  for rows, x in inputs.items():
    np.testing.assert_array_equal(store(w, x, power=2), first[rows])
  assert all(e.program is not None for e in store.entries.values()) and store.dropped == 2


def test_without_a_folder_nothing_is_stored(tmp_path):
  w, x = arrays()
  for _ in range(2):
    store, _, _ = stored(None)
    store(w, x, power=2)
    assert store.traced == 1
  assert not list(tmp_path.iterdir())


def test_a_translator_made_anew_loads_its_searches_and_translates_alike(
    trained_run, tmp_path, monkeypatch, untraced):
  monkeypatch.setattr(programs, "store_folder", lambda: tmp_path)
  lines = read_lines(SAMPLE / "test.en")[:10]
  first = Translator.load(trained_run)
  expected = first.translate(lines, beam_size=3, batch_size=4)
  scores = first.score(lines, expected, batch_size=4)
  assert first._search.traced == first.search_programs > 0 and files(tmp_path)
  programs.compiled_functions.cache_clear()  # as in a new process
  again = Translator.load(trained_run)
  assert again.translate(lines, beam_size=3, batch_size=4) == expected
  assert again.score(lines, expected, batch_size=4) == scores
  assert (again._search.traced, again._search.loaded) == (0, first.search_programs)
  assert again._forced_logprob.traced == 0 and again.search_programs == first.search_programs


def test_a_translator_keeping_one_search_translates_as_one_keeping_all(trained_run):
  lines = read_lines(SAMPLE / "test.en")[:12]
  lines += [" ".join(lines[:3]), " ".join(lines[3:9])]  # longer: batches of other shapes
  programs.compiled_functions.cache_clear()  # none built yet in this process
  all_kept = Translator.load(trained_run, programs=0)
  expected = all_kept.translate(lines, beam_size=3, batch_size=4)
  assert all_kept.search_programs >= 2 and all_kept._search.dropped == 0
  one = Translator.load(trained_run, programs=1)  # the same compiled functions, now keeping one
  assert one.translate(lines, beam_size=3, batch_size=4) == expected
  assert one._search.dropped >= all_kept.search_programs - 1
  assert sum(e.program is not None for e in one._search.entries.values()) == 1


def test_the_server_keeps_every_batch_shape_it_compiled(trained_run):
  from seq2seq.decoding.translator import WARM_UP
  server = Translator.load(trained_run, programs=1)
  server.warm_up(max_batch=2, longest=16)
  before = server._search.dropped
  for rows in (1, 2):  # every shape warm_up compiled, at the server's batch size
    server.translate([WARM_UP] * rows, batch_size=2)
  assert server._search.dropped == before


def test_a_new_process_loads_what_the_last_one_stored(trained_run, tmp_path):
  """translate.py in two processes over one compilation cache: the first stores its
  programs, the second stores none (it loads each it runs) and writes the same
  translations."""
  cache = tmp_path / "cache"
  env = {**os.environ, "SEQ2SEQ_XLA_CACHE": str(cache)}
  args = ("translate.py", "--workdir", trained_run, "--beam", "4", "--batch-size", "3")
  text = "".join(line + "\n" for line in read_lines(SAMPLE / "test.en")[:7]).encode()
  first = run_cli(*args, input_bytes=text, fresh_process=True, env=env)
  stored_first = files(cache / "seq2seq-programs")
  second = run_cli(*args, input_bytes=text, fresh_process=True, env=env)
  assert second.stdout == first.stdout and len(second.stdout.splitlines()) == 7
  assert stored_first and files(cache / "seq2seq-programs") == stored_first


TWO_DEVICES = """
import sys
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
sys.path[:0] = ["tests", "tests/decoding"]
from test_program_store import arrays, stored
from pathlib import Path
store, _, _ = stored(Path(sys.argv[1]))
replicated = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec())
w, x = (jax.device_put(a, replicated) for a in arrays())
np.save(sys.argv[2], np.asarray(store(w, x, power=2)))
"""


def test_a_program_stored_for_two_devices_is_not_run_on_one(tmp_path):
  """A run trained on two devices stores its validation's searches for arguments on two;
  a process of one device translating that run must trace its own, not load those."""
  proc = subprocess.run([sys.executable, "-c", TWO_DEVICES, str(tmp_path), str(tmp_path / "y.npy")],
                        cwd=ROOT, capture_output=True, timeout=300,
                        env={**os.environ, "XLA_FLAGS": xla_flags(2)})
  assert proc.returncode == 0, proc.stderr.decode()[-3000:]
  assert len(files(tmp_path)) == 1  # the control: the two-device program is stored
  store, traces, _ = stored(tmp_path)
  np.testing.assert_allclose(store(*arrays(), power=2), np.load(tmp_path / "y.npy"), rtol=1e-6)
  assert (store.traced, store.loaded) == (1, 0) and len(files(tmp_path)) == 2


def test_the_fingerprint_follows_the_package_source_and_jax(tmp_path):
  """code_fingerprint() is the same in another process (it names files across
  processes) and changes with a setting that changes traces."""
  code = ("import jax; from seq2seq.decoding.program_store import code_fingerprint as f; "
          "a = f(); f.cache_clear(); jax.config.update('jax_enable_x64', True); print(a, f())")
  here = program_store.code_fingerprint()
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                       text=True, check=True).stdout.split()
  assert out[0] == here and out[1] != here
