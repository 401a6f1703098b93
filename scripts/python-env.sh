#!/usr/bin/env bash
# Makes the Python environment tests/python runs in (Microsoft's Service Bus
# SDK, pytest), at ${CARGO_TARGET_DIR:-target}/pyenv, from the pinned
# tests/python/requirements.txt; made again only when that file changes.
# Prints the interpreter's path.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
env_dir="$target/pyenv"
requirements=tests/python/requirements.txt
stamp="$env_dir/requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ ! -x "$env_dir/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  rm -rf "$env_dir"
  python3 -m venv "$env_dir" >&2
  "$env_dir/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" >&2
  echo "$want" > "$stamp"
fi
echo "$(cd "$env_dir/bin" && pwd)/python"
