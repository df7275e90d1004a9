# The author loop and the user's entry points. Everything runs in .venv.
#   make book        install everything (first time) and render the book
#   make test        the whole test suite: tests/ plus every notebook (nbval)
#   make export      chapters/*.md -> transformer/*.py
#   make notebooks   export, then regenerate and execute book/*.ipynb
#                    (one chapter: make notebooks NB=01_softmax); also
#                    rewrites the execution record and book/status.md
#   make refresh     carry prose and tag edits into the executed notebooks
#                    whose code cells are unchanged (outputs kept)
#   make numbers     collect the executed notebooks' glued numbers into
#                    results/report/book_numbers.json (what REPORT.md quotes)
#   make all         export, notebooks, numbers, test, book
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
NB     ?=

.PHONY: setup data mathjax export notebooks refresh numbers test test-other-host book all clean
.DEFAULT_GOAL := book

setup: $(VENV)/.installed data mathjax

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

data: $(VENV)/.installed
	$(PY) -c "from transformer import load_corpus; print(len(load_corpus()), 'characters of corpus cached')"

mathjax:
	tools/fetch_mathjax.sh

export: $(VENV)/.installed
	$(PY) tools/literate.py export

notebooks: export
	$(PY) tools/literate.py execute $(NB)

refresh: export
	$(PY) tools/literate.py refresh $(NB)

numbers: $(VENV)/.installed
	$(PY) tools/book_numbers.py

test: setup
	$(PY) -m pytest

# The notebooks on a simulated other machine (needs unshare; see the script).
test-other-host: setup
	tools/other_host.sh $(PY) -m pytest book

book: setup
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

all: notebooks numbers test book

clean:
	rm -rf _build .pytest_cache
