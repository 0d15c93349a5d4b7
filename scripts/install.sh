#!/usr/bin/env bash
# Installs what the orchestrator needs on a fresh Debian/Ubuntu machine, idempotently.
#   scripts/install.sh          serving: cmake, ninja, a C++ compiler, ccache and git (to build llama.cpp),
#                               a virtualenv in .venv, and the package with its runtime dependencies
#   scripts/install.sh --test   the above plus what only the test command needs: Debian's chromium
#                               (the console's browser tests) and the package's [test] extras
#                               (pytest, the API SDKs, Playwright's Python package, ruff, mypy, import-linter)
# llama-cpp-python is installed without compiling llama.cpp: it loads our own native build.
set -euo pipefail
cd "$(dirname "$0")/.."
TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) TEST=1 ;;
    *) echo "usage: scripts/install.sh [--test]" >&2; exit 2 ;;
  esac
done

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
command -v ccache >/dev/null || need+=(ccache)
command -v git >/dev/null || need+=(git)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# the web console's browser tests (tests/serve/console/test_console.py) drive Debian's chromium through
# Playwright's Python package; Playwright's own browser download is never used. Serving needs no browser.
if [ "$TEST" = 1 ]; then
  [ -x /usr/bin/chromium ] || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "==> installing system packages: ${need[*]}"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "error: missing ${need[*]}; install them with your package manager" >&2
    exit 1
  fi
fi

# setuptools warns on every editable install that a folder named like the package may shadow it;
# here that folder is the package itself, so the warning (a boxed page on each run) only alarms
export PYTHONWARNINGS="ignore:Editable installation"
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
  echo "error: Python 3.11+ is required (found $("$PY" --version))" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
if [ "$TEST" = 1 ]; then
  echo "==> installing the orchestrator package with its test extras (llama-cpp-python without its own native build)"
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" python -m pip install -q -e ".[test]"
else
  echo "==> installing the orchestrator package (llama-cpp-python without its own native build)"
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" python -m pip install -q -e .
fi
