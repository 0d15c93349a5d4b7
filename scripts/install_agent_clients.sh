#!/usr/bin/env bash
# Installs the real coding-agent clients the test suite drives against `orchestrator up`, at pinned
# versions, with npm, into a cached folder outside the repository:
#   $ORCHESTRATOR_CACHE/agent-clients/<versions>/node_modules/.bin/{claude,codex,opencode}
# (ORCHESTRATOR_CACHE defaults to ~/.cache/orchestrator). A second run with the same versions does
# nothing. Prints the folder holding the executables on its last line. Exits 2 when npm is missing
# or the registry cannot be reached (the tests then skip, saying so), 1 on any other failure.
# Used by scripts/test.sh and by the `agent_clients` pytest fixture (tests/agent_clients.py).
set -euo pipefail

CLAUDE_CODE=@anthropic-ai/claude-code@2.1.197
CODEX=@openai/codex@0.171.0
OPENCODE=opencode-ai@1.18.33

cache=${ORCHESTRATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/orchestrator}
key=$(printf '%s\n' "$CLAUDE_CODE" "$CODEX" "$OPENCODE" | sha256sum | cut -c1-12)
dest="$cache/agent-clients/$key"
bin="$dest/node_modules/.bin"

if [ -x "$bin/claude" ] && [ -x "$bin/codex" ] && [ -x "$bin/opencode" ] && [ -f "$dest/.complete" ]; then
  echo "$bin"
  exit 0
fi
command -v npm >/dev/null || { echo "npm is not installed (apt-get install npm)" >&2; exit 2; }
mkdir -p "$dest"
# one installer at a time per folder (several test runs may start together)
exec 9>"$dest.lock"
flock 9
if [ ! -f "$dest/.complete" ]; then
  timeout 30 npm ping >/dev/null 2>&1 || { echo "the npm registry is unreachable" >&2; exit 2; }
  echo "==> installing $CLAUDE_CODE $CODEX $OPENCODE into $dest" >&2
  # no update checks, telemetry or funding notes: the clients only ever talk to our endpoint
  (cd "$dest" && [ -f package.json ] || echo '{"private": true}' > "$dest/package.json")
  npm install --prefix "$dest" --no-audit --no-fund --no-update-notifier --loglevel=error \
    "$CLAUDE_CODE" "$CODEX" "$OPENCODE" >&2
  touch "$dest/.complete"
fi
echo "$bin"
