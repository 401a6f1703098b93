#!/bin/sh
# Prints the medians criterion stored for the `evaluate` bench, and the ratio
# of the interpreted forwarding filter to the hand-written check of the same
# condition. Run after `cargo bench -p nimbus-sqlfilter --bench evaluate`.
set -eu
dir="${CARGO_TARGET_DIR:-$(dirname "$0")/../../../target}/criterion"
python3 - "$dir" <<'PY'
import json, os, sys
root = sys.argv[1]
def median(name):
    with open(os.path.join(root, name, "new", "estimates.json")) as f:
        return json.load(f)["median"]["point_estimate"]
names = [
    "forwarding_filter/hand_written_rust",
    "forwarding_filter/sql_filter_evaluate",
    "like_in_exists_filter_evaluate",
    "forwarding_filter_parse",
    "forwarding_action_apply_on_clone",
]
for name in names:
    print(f"{name:45} median {median(name):9.1f} ns")
ratio = median("forwarding_filter/sql_filter_evaluate") / median("forwarding_filter/hand_written_rust")
print(f"{'forwarding filter: SqlFilter / hand-written':45} ratio  {ratio:9.2f}x")
PY
