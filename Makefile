# Two entry points that set themselves up on a fresh machine:
#   make demo   train the tiny config on data/sample, translate, score
#   make test   lint and run the test suite
# Both create (or reuse) the virtual environment .venv with the pinned dependencies of
# requirements.lock. `make test-pyproject` runs the suite in .venv-pyproject, installed
# from pyproject.toml alone, as `pip install -e ".[test]"` installs it for a user.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN ?= runs/tiny

.PHONY: install demo lint test test-pyproject bench clean

$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e '.[test]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) train.py --config configs/tiny.py --workdir $(RUN)
	printf 'A young man is running in the park.\nTwo dogs are playing in the snow.\n' \
	  | $(PY) translate.py --workdir $(RUN) --beam 4
	$(PY) evaluate.py --workdir $(RUN) --split test --beam 4

lint: install
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest -q tests

.venv-pyproject/.installed: pyproject.toml
	$(PYTHON) -m venv .venv-pyproject
	.venv-pyproject/bin/python -m pip install --quiet --upgrade pip
	.venv-pyproject/bin/python -m pip install --quiet -e '.[test]'
	touch $@

test-pyproject: .venv-pyproject/.installed
	.venv-pyproject/bin/python -m pytest -q tests

clean:
	rm -rf $(VENV) .venv-pyproject runs
