#!/usr/bin/env bash
# Installs everything the orchestrator needs on a fresh Debian/Ubuntu machine, idempotently:
# system tools (cmake, ninja, a C++ compiler, ccache, chromium for the console tests), a virtualenv in .venv, and the package.
# llama-cpp-python is installed without compiling llama.cpp: it loads our own native build.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
command -v ccache >/dev/null || need+=(ccache)
command -v git >/dev/null || need+=(git)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# the web console's browser tests (tests/test_console.py) drive Debian's chromium through
# Playwright's Python package; Playwright's own browser download is never used
[ -x /usr/bin/chromium ] || need+=(chromium)
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

PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
  echo "error: Python 3.11+ is required (found $("$PY" --version))" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
echo "==> installing the orchestrator package (llama-cpp-python without its own native build)"
CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" python -m pip install -q -e ".[test]"
