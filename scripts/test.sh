#!/usr/bin/env bash
# The test command: installs what it needs, builds the guest components the
# tests load, then runs every host test (unit, integration, black-box).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build-guests.sh
# Microsoft's Python SDK, for the AMQP endpoint's tests (tests/python).
NIMBUS_PYTHON="$(scripts/python-env.sh)"
export NIMBUS_PYTHON
# Microsoft's JavaScript SDK, for the same endpoint (tests/js).
NIMBUS_JS_ENV="$(scripts/js-env.sh)"
export NIMBUS_JS_ENV
cargo build --bin nimbus
cargo test "$@"
