#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A session against nbrun serve with curl alone: open one, upload a CSV, execute
# twice (the second uses the DataFrame the first made), download the file the
# code wrote, close. Usage: examples/curl-session.sh [OUT_DIR]
#   NBRUN_URL    the server (default http://127.0.0.1:8411)
#   NBRUN_TOKEN  its bearer token (default: the local server's STATE/token)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
url=${NBRUN_URL:-http://127.0.0.1:8411}
token=${NBRUN_TOKEN:-$(cat "${NBRUN_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/nbrun}/token")}
out=${1:-curl-session-out}
mkdir -p "$out"
S=$url/v1/sessions

# Every call: the token, errors shown (the server answers {"error", "kind"}).
api() { curl -sS --fail-with-body -H "Authorization: Bearer $token" "$@"; }
# One field of a JSON document on stdin (the example's only other tool).
field() { python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1], {}, {"d": d}))' "$1"; }

echo "== open a session"
sid=$(api "$S" -d '{"timeout_idle": "5m"}' | field 'd["id"]')
echo "session $sid"
trap 'api -X DELETE "$S/$sid" >/dev/null 2>&1 || true' EXIT   # closed even if a step fails

echo "== upload sales.csv to /mnt/data"
api -X PUT "$S/$sid/files/sales.csv" --data-binary @"$here/sales.csv"; echo

echo "== execute 1: load it"
api "$S/$sid/execute" -d '{"code": "import pandas as pd\nsales = pd.read_csv(\"/mnt/data/sales.csv\")\nsales[\"revenue\"] = sales[\"units\"] * sales[\"price\"]\nprint(len(sales), \"rows loaded\")"}' \
	| field 'd["status"] + ": " + d["stdout"].strip()'

echo "== execute 2: the same DataFrame, still in the kernel"
api "$S/$sid/execute" -d '{"code": "by_region = sales.groupby(\"region\")[\"revenue\"].sum()\nby_region.to_csv(\"/mnt/data/revenue.csv\")\nprint(by_region.to_string())"}' \
	| field 'd["status"] + ":\n" + d["stdout"].rstrip() + "\nwritten: " + ", ".join(f["path"] for f in d["files"])'

echo "== download revenue.csv"
api "$S/$sid/files/revenue.csv" -o "$out/revenue.csv"
cat "$out/revenue.csv"

echo "== close"
api -X DELETE "$S/$sid"; echo
trap - EXIT
