#!/usr/bin/env bash
# Makes the Node environment tests/js runs in (Microsoft's JavaScript Service
# Bus SDK), at ${CARGO_TARGET_DIR:-target}/jsenv, from the pinned
# tests/js/package-lock.json (`npm ci`); made again only when that file
# changes. Prints the directory that holds its node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null; then
  echo "js-env: Node.js and npm are needed for tests/js (the machine's node, 20 or later)" >&2
  exit 1
fi
target="${CARGO_TARGET_DIR:-target}"
env_dir="$target/jsenv"
lock=tests/js/package-lock.json
stamp="$env_dir/lock.sha256"
want="$(sha256sum "$lock" | cut -d' ' -f1)"
if [[ ! -d "$env_dir/node_modules" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  rm -rf "$env_dir"
  mkdir -p "$env_dir"
  cp tests/js/package.json "$lock" "$env_dir/"
  (cd "$env_dir" && npm ci --silent --no-audit --no-fund >&2)
  echo "$want" > "$stamp"
fi
echo "$(cd "$env_dir" && pwd)"
