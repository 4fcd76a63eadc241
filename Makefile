# Two ways in, one venv (.venv): `make quickstart` installs only the project and its server/client dependencies (no
# torch, no extras; about 70 MB) and runs one echo episode; `make setup` installs the full stack into the same venv
# (torch first from the local CPU wheel: any other torch spec pulls CUDA), so quickstart then setup just adds to it.
# TORCH_INDEX=https://download.pytorch.org/whl/cpu takes torch from PyTorch's CPU-only index (a normal machine).
# pip runs with -qq: its errors are shown, its warnings (e.g. an extra index that lacks a package) and progress are not.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_INDEX ?=
PIP := $(BIN)/pip install -qq --disable-pip-version-check
# The reference environments' OpenEnv packages (their logic lives there, not in the library), installed editable
# beside the project by every target that serves them; `openenv-echo serve NAME` finds them through the registry.
ENV_PKGS := envs/echo_env envs/terminal_env envs/sql_env envs/shell_env
ENV_PYPROJECTS := $(ENV_PKGS:%=%/pyproject.toml)
EDITABLE_ENVS := $(ENV_PKGS:%=-e %)

.PHONY: setup quickstart lint docs test test-fast test-main test-docker test-trainers setup-trainers test-verifiers \
	setup-verifiers bench
$(BIN)/.installed: pyproject.toml $(ENV_PYPROJECTS)
	@echo "[make setup] creating $(VENV) with $(PY); installing torch==2.13.0$(if $(TORCH_INDEX), from $(TORCH_INDEX)), then -e '.[all,test,docs]' and the env packages"
	@$(PY) -m venv $(VENV)
	@echo "[make setup] 1/3 pip itself"
	@$(PIP) --upgrade pip
	@echo "[make setup] 2/3 torch==2.13.0 (CPU; a few minutes)"
	@$(PIP) torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	@echo "[make setup] 3/3 the project with every extra (trainers, docs, tests; several minutes)"
	@$(PIP) -e '.[all,test,docs]' $(EDITABLE_ENVS)
	@touch $@

# The light install: the project alone (server, client, CLI); skipped when the full stack is already there.
$(BIN)/.quickstart: pyproject.toml $(ENV_PYPROJECTS)
	@if [ -f $(BIN)/.installed ] && [ $(BIN)/.installed -nt pyproject.toml ]; then \
	  echo "[make quickstart] $(VENV) already has the full stack (make setup)"; \
	else \
	  echo "[make quickstart] 1/2 creating $(VENV) with $(PY)" && $(PY) -m venv $(VENV) && \
	  echo "[make quickstart] 2/2 pip install -e . and the env packages (the server, client, CLI and envs; no torch; about a minute)" && \
	  $(PIP) -e . $(EDITABLE_ENVS) ; \
	fi
	@touch $@

setup: $(BIN)/.installed

# The 3.12-only trainer tier (SkyRL's loss path and worker step, skyrl-gym, SkyRL's local Tinker-API server with JAX on
# CPU): .venv-trainers, built with the first python3.12 found (PATH, then pyenv), pinned by requirements/trainers.txt.
# On Linux x86_64 PyPI's only torch for 3.12 is a CUDA build (~4.7 GB with its CUDA libraries; it runs on the CPU);
# TORCH_INDEX=https://download.pytorch.org/whl/cpu takes a CPU-only one instead.
PY312 ?= $(shell scripts/find-python312.sh)
TVENV ?= .venv-trainers
TBIN := $(TVENV)/bin
NO_PY312 := no python3.12 found (PATH, pyenv): the Python 3.12 trainer tier (SkyRL, Tinker server) is skipped

$(TBIN)/.installed: pyproject.toml requirements/trainers.txt $(ENV_PYPROJECTS)
	@echo "[make setup-trainers] creating $(TVENV) with $(PY312); torch==2.13.0, then -e '.[skyrl,test]' pinned by requirements/trainers.txt"
	$(PY312) -m venv $(TVENV)
	$(TBIN)/pip install -q --upgrade pip
	$(TBIN)/pip install -q -c requirements/trainers.txt torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(TBIN)/pip install -q -c requirements/trainers.txt -e '.[skyrl,test]' $(EDITABLE_ENVS)
	touch $@

setup-trainers:
	@if [ -z "$(PY312)" ]; then echo "[make setup-trainers] $(NO_PY312)"; else $(MAKE) --no-print-directory $(TBIN)/.installed; fi

# The verifiers (prime-rl) tier gets a venv of its own, .venv-verifiers: verifiers 0.4 pins mcp==2.0.0 and the test extra's
# openenv needs mcp < 2 (through fastmcp 3). Python >= 3.11 ($(PY)); torch first, then -e '.[verifiers]' and pytest.
VVENV ?= .venv-verifiers
VBIN := $(VVENV)/bin
PY_OK_VERIFIERS := $(shell $(PY) -c 'import sys; print(int(sys.version_info >= (3, 11)))' 2>/dev/null)
NO_PY311 := $(PY) is older than Python 3.11, which verifiers needs: the verifiers tier is skipped

$(VBIN)/.installed: pyproject.toml $(ENV_PYPROJECTS)
	@echo "[make setup-verifiers] creating $(VVENV) with $(PY); torch==2.13.0, then -e '.[verifiers]' and pytest"
	$(PY) -m venv $(VVENV)
	$(VBIN)/pip install -q --upgrade pip
	$(VBIN)/pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(VBIN)/pip install -q -e '.[verifiers]' $(EDITABLE_ENVS) 'pytest>=8' 'pytest-timeout>=2.3'
	touch $@

setup-verifiers:
	@if [ "$(PY_OK_VERIFIERS)" != 1 ]; then echo "[make setup-verifiers] $(NO_PY311)"; else $(MAKE) --no-print-directory $(VBIN)/.installed; fi

quickstart: $(BIN)/.quickstart
	@echo "[make quickstart] an echo env server as a local process, one scripted episode printed by role"
	@$(BIN)/openenv-echo quickstart echo
	@echo "[make quickstart] next: '$(BIN)/openenv-echo serve echo --port 8000' in one terminal and"
	@echo "  '$(BIN)/openenv-echo episode http://127.0.0.1:8000 -i' in another (type actions, Ctrl-D ends);"
	@echo "  'make setup' adds torch, the tokenizers, trainers and docs to $(VENV) (make test, make docs need it)"

# Static checks (configured in pyproject.toml): ruff lint, ruff format, mypy over the package; zero findings.
lint: setup
	@echo "[make lint] ruff check, ruff format --check, mypy (the package)"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site, built offline into site/ (not committed); --strict: a broken link, a page missing from the
# nav or an API reference that does not resolve is an error. tests/docs builds it too (make test runs that).
docs: setup
	@echo "[make docs] mkdocs build --strict -> site/ (open site/index.html)"
	$(BIN)/mkdocs build --strict

# Everything, as CI runs it: the static checks, then the container tier (as root it may apt-install docker and start
# dockerd; it removes the images it added and stops the dockerd it started, KEEP_DOCKER=1 keeps them), then every
# other test, then the Python 3.12 trainer tier and the verifiers (prime-rl) tier, each in its own venv.
test: lint docs test-docker test-main test-trainers test-verifiers

# The inner loop: no containers, no trainer runs.
test-fast: setup
	@echo "[make test-fast] pytest -m 'not docker and not trainer' (no containers, no trainer runs)"
	$(BIN)/python -m pytest -q -m "not docker and not trainer"

test-main: setup
	@echo "[make test-main] pytest -m 'not docker' (everything but the container tier, trainer runs included)"
	$(BIN)/python -m pytest -q -m "not docker"

# SkyRL and Tinker-server recipes in .venv-trainers; without a python3.12 the tier's tests report the skip and why.
test-trainers: setup setup-trainers
	@echo "[make test-trainers] pytest tests/trainers312 (SkyRL's loss path and worker step, skyrl-gym, SkyRL's Tinker-API server)"
	@if [ -z "$(PY312)" ]; then OPENENV_ECHO_NO_PY312="$(NO_PY312)" $(BIN)/python -m pytest -q -rsP tests/trainers312; \
	else $(TBIN)/python -m pytest -q -rsP tests/trainers312; fi

# EchoEnv through verifiers' own machinery on live servers, and the prime-rl recipe (tests/verifiers, .venv-verifiers);
# without Python 3.11 the main venv runs the tier's one test, which reports the skip and why.
test-verifiers: setup setup-verifiers
	@echo "[make test-verifiers] pytest tests/verifiers in $(VVENV) (EchoEnv through verifiers' machinery, the prime-rl recipe)"
	@if [ "$(PY_OK_VERIFIERS)" != 1 ]; then $(BIN)/python -m pytest -q -rs tests/verifiers; \
	else $(VBIN)/python -m pytest -q -rs tests/verifiers; fi

test-docker: setup
	@echo "[make test-docker] the container tier: scripts/docker/ci-tier.sh"
	PYTHON=$(BIN)/python bash scripts/docker/ci-tier.sh

bench: setup
	$(BIN)/python bench/bench_server.py
