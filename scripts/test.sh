#!/usr/bin/env bash
# Installs, builds the native llama.cpp (cached outside the repo, keyed by pin, patches and flags; and once
# without the patches, for the adopted-llama-server tests),
# runs the static checks (ruff lint and format, mypy --strict, the import-linter layer contract; any
# finding fails the run) and then the whole test suite against real llama-server processes.
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
. .venv/bin/activate
echo "==> static checks: ruff, ruff format, mypy --strict, lint-imports"
ruff check orchestrator tests scripts/*.py
ruff format --check orchestrator tests scripts/*.py
mypy
lint-imports
orchestrator build --backend cpu
# the same pinned llama.cpp WITHOUT native/patches, llama-server only (its own key, never the current
# build; ccache makes it a few minutes once): tests/native/test_adopt.py serves through it as a
# user's own llama-server (build.llama_server)
orchestrator build --backend cpu --no-patches
# the real agent clients (Claude Code, Codex CLI, opencode, Qwen Code, Kilo, Continue cn, aider) at pinned
# versions, cached outside the repo; status 2 (npm or PyPI unreachable) leaves their tests to skip with
# that reason
bash scripts/install_agent_clients.sh >/dev/null || [ $? -eq 2 ]
export ORCHESTRATOR_REQUIRE_NATIVE=1
# test files run side by side on every core (pyproject's addopts); the 25 slowest tests are printed
# at the end, so a run shows where its time goes
exec python -m pytest --durations=25 "$@"
