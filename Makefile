# Two entry points that set themselves up on a fresh machine:
#   make demo   train the tiny config on data/sample, translate, score
#   make test   run the test suite
# Both create (or reuse) the virtual environment .venv with the pinned dependencies.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN ?= runs/tiny

.PHONY: install demo test bench clean

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

test: install
	$(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) runs
