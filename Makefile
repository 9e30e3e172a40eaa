# Two entry points that set themselves up on a fresh machine:
#   make demo   train the tiny config on data/sample, translate, score
#   make test   lint and run the test suite
#   make test-fast   lint and run the fast subset (-m "not slow"), for the inner loop
#   make bench-smoke every bench/ script end to end on the tiny run (CI runs it too)
# Both create (or reuse) the virtual environment .venv with the pinned dependencies of
# requirements.lock. `make test-pyproject` runs the suite in .venv-pyproject, installed
# from pyproject.toml alone, as `pip install -e ".[test]"` installs it for a user.
# `make test-wheel` builds the wheel, installs it into a fresh venv outside the checkout
# and runs the installed commands there: train the tiny preset by name, translate.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN ?= runs/tiny

.PHONY: install libretranslate demo lint test test-fast bench-smoke test-pyproject test-wheel bench clean

# Bytecode is compiled once, after the installs, on every core and without the packages'
# own test suites (pip compiles each file on one core: 51.9 s against 20.6 s + 11.9 s on 2
# cores). Every module imported is compiled ahead all the same, which matters where
# PYTHONDONTWRITEBYTECODE is set: there no import writes a .pyc.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements.lock
	$(PY) -m pip install --quiet --no-compile --no-deps -e '.[test]'
	# Argos Translate for tests/serving/test_argos.py, without stanza and PyTorch, which
	# it imports at start but which its tests do not need (the test says how).
	$(PY) -m pip install --quiet --no-compile --no-deps argostranslate==1.11.0
	# The German noun lexicon that glossary terms agree by (seq2seq/decoding/german.py),
	# without the Wiktionary dump parser it brings, which pins lxml below 5 (its lookup data
	# needs none of it).
	$(PY) -m pip install --quiet --no-compile --no-deps german-nouns==1.2.5
	$(PY) -m compileall -q -j 0 -x 'site-packages/.*/tests?/' $$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
	touch $@

install: $(VENV)/.installed

# LibreTranslate itself in a virtual environment of its own (its pins are not ours), for
# tests/serving/test_libretranslate_itself.py, which skips with the reason without it.
LT_VENV ?= .venv-libretranslate
$(LT_VENV)/.installed: requirements-libretranslate.lock
	$(PYTHON) -m venv $(LT_VENV)
	$(LT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LT_VENV)/bin/python -m pip install --quiet -r requirements-libretranslate.lock
	touch $@

libretranslate: $(LT_VENV)/.installed

demo: install
	$(PY) train.py --config tiny --workdir $(RUN)
	printf 'A young man is running in the park.\nTwo dogs are playing in the snow.\n' \
	  | $(PY) translate.py --workdir $(RUN) --beam 4
	$(PY) evaluate.py --workdir $(RUN) --split test --beam 4

lint: install
	$(VENV)/bin/ruff check .

# One pytest worker per core (pytest-xdist), each test file on one worker so that a file's
# module fixtures are built once, handed out in the order tests/conftest.py collects them
# (the longest files first).
PYTEST := -m pytest -q -n auto --dist loadfile --no-loadscope-reorder tests -m "not bench_smoke"

test: lint libretranslate
	$(PY) $(PYTEST)

# Every script of bench/ run end to end on the tiny run (tests/bench/test_bench_smoke.py):
# minutes, so apart from the suite; .ci/run calls it after `make test`.
bench-smoke: install
	$(PY) -m pytest -q -n auto --dist load tests/bench

# What neither trains, serves nor decodes a trained run (tests/conftest.py marks the rest;
# the bench smoke runs are slow too).
test-fast: lint
	$(PY) $(PYTEST) -m "not slow"

.venv-pyproject/.installed: pyproject.toml
	$(PYTHON) -m venv .venv-pyproject
	.venv-pyproject/bin/python -m pip install --quiet --upgrade pip
	.venv-pyproject/bin/python -m pip install --quiet -e '.[test]'
	touch $@

test-pyproject: .venv-pyproject/.installed
	.venv-pyproject/bin/python $(PYTEST)

# The wheel's dependency ranges resolved within requirements.lock (the versions tested).
WHEEL_TMP ?= /tmp/seq2seq-wheel-test
test-wheel: install
	rm -rf dist $(WHEEL_TMP) && mkdir -p $(WHEEL_TMP)
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .
	$(PYTHON) -m venv $(WHEEL_TMP)/venv
	$(WHEEL_TMP)/venv/bin/python -m pip install --quiet --upgrade pip
	$(WHEEL_TMP)/venv/bin/python -m pip install --quiet -c requirements.lock dist/*.whl
	cd $(WHEEL_TMP) && JAX_PLATFORMS=cpu venv/bin/seq2seq-train --config tiny --workdir run \
	  --config.train.max_steps=100 --config.train.eval_every=100 --config.train.checkpoint_every=100
	cd $(WHEEL_TMP) && printf 'A man is running.\nTwo dogs play in the snow.\n' \
	  | JAX_PLATFORMS=cpu venv/bin/seq2seq-translate --workdir run --beam 2 > out.de \
	  && test "$$(wc -l < out.de)" -eq 2 && cat out.de
	cd $(WHEEL_TMP) && venv/bin/python -c "import seq2seq; print('installed', seq2seq.__version__, seq2seq.__file__)"

clean:
	rm -rf $(VENV) .venv-pyproject $(LT_VENV) runs dist
