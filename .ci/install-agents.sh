#!/usr/bin/env bash
# Install the agent CLIs pinned in tests/agents/real/versions outside the checkout
# ($OUTPOST_AGENTS_DIR, else ~/.cache/outpost-tui/agents), where the
# real-program tests look for them. Idempotent: a program already at its pinned version is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
pins=tests/agents/real/versions
dest=${OUTPOST_AGENTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outpost-tui/agents}
mkdir -p "$dest"

npm_specs=()
pip_specs=()
while read -r program installer package version; do
  case "$program" in ''|'#'*) continue ;; esac
  case "$installer" in
    npm)
      installed="$dest/node_modules/$package/package.json"
      if [ -f "$installed" ] && grep -q "\"version\": \"$version\"" "$installed"; then
        continue
      fi
      npm_specs+=("$package@$version") ;;
    pip) pip_specs+=("$package==$version") ;;
    *) echo "$pins: $program: unknown installer '$installer' (expected npm or pip)" >&2; exit 2 ;;
  esac
done < "$pins"

if [ ${#npm_specs[@]} -gt 0 ]; then
  command -v npm >/dev/null || { echo "install-agents: npm is needed for ${npm_specs[*]}" >&2; exit 1; }
  # A private package.json keeps npm from walking up to another project's.
  [ -f "$dest/package.json" ] || echo '{"private": true}' > "$dest/package.json"
  npm install --prefix "$dest" --no-audit --no-fund --save-exact --loglevel=error "${npm_specs[@]}"
fi
if [ ${#pip_specs[@]} -gt 0 ]; then
  [ -x "$dest/venv/bin/pip" ] || python3 -m venv "$dest/venv"
  "$dest/venv/bin/pip" install -q "${pip_specs[@]}"
fi
