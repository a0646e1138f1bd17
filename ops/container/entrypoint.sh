#!/bin/bash
# Relay's container entrypoint (Containerfile): checks, then `exec relay serve` (PID 1 gets the signals itself).
#
# - refuses to run as root (the image runs as its `relay` user; `--user UID:GID` works too);
# - VAR_FILE: for the secrets (RELAY_ADMIN_TOKEN, RELAY_DATABASE_URL, RELAY_FORWARD_SECRET,
#   RELAY_ALERT_WEBHOOK_URL, RELAY_ALERT_WEBHOOK_SECRET), a file holding the value (a compose/Kubernetes secret)
#   may be named instead of the value; setting both is an error;
# - RELAY_DATA_DIR must be a writable directory (the volume);
# - with RELAY_DATABASE_URL, waits up to RELAY_DATABASE_WAIT_S seconds [60] for PostgreSQL to accept a connection
#   (a database that starts beside Relay is often a few seconds late), then fails naming the error, never the URL.
# No arguments, or arguments starting with "-": `relay serve ARGS`. Anything else is run as given (`relay apps
# create my-app`, `bash`), after the same checks.
set -euo pipefail

fail() {
    echo "relay-entrypoint: $*" >&2
    exit 1
}

if [ "$(id -u)" = 0 ]; then
    fail "refusing to run as root: run as the image's user (the default) or with --user UID:GID"
fi

for name in RELAY_ADMIN_TOKEN RELAY_DATABASE_URL RELAY_FORWARD_SECRET RELAY_ALERT_WEBHOOK_URL \
    RELAY_ALERT_WEBHOOK_SECRET; do
    file_var="${name}_FILE"
    file="${!file_var:-}"
    [ -n "$file" ] || continue
    [ -z "${!name:-}" ] || fail "set $name or $file_var, not both"
    [ -f "$file" ] && [ -r "$file" ] || fail "$file_var: $file is not a readable file"
    value="$(cat -- "$file")"  # $(...) drops the trailing newline an editor leaves
    [ -n "$value" ] || fail "$file_var: $file is empty"
    export "$name=$value"
    unset "$file_var" value
done

data_dir="${RELAY_DATA_DIR:-relay-data}"
mkdir -p -- "$data_dir" 2>/dev/null || true
[ -d "$data_dir" ] && [ -w "$data_dir" ] \
    || fail "RELAY_DATA_DIR $data_dir is not a writable directory for uid $(id -u) (the volume's owner?)"

wait_s="${RELAY_DATABASE_WAIT_S:-60}"
[[ "$wait_s" =~ ^[0-9]+$ ]] || fail "RELAY_DATABASE_WAIT_S must be a whole number of seconds"
unset RELAY_DATABASE_WAIT_S

if [ $# -eq 0 ] || [ "${1#-}" != "$1" ]; then
    set -- relay serve "$@"
fi

if [ "$1" = relay ] && [ -n "${RELAY_DATABASE_URL:-}" ]; then
    # Relay's own interpreter (beside the `relay` script) has psycopg.
    relay="$(command -v relay)" || fail "relay is not on PATH ($PATH)"
    python="$(dirname -- "$relay")/python3"
    WAIT_S="$wait_s" "$python" - <<'PY' || exit 1
import os
import sys
import time
from urllib.parse import urlsplit

import psycopg

url = os.environ["RELAY_DATABASE_URL"]
try:
    password = urlsplit(url).password
except ValueError:
    password = None
wait_s = int(os.environ["WAIT_S"])
deadline = time.monotonic() + wait_s
while True:
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as error:
        # psycopg's message names the host and user; a malformed URL could be quoted whole: neither it nor its
        # password is ever printed.
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        for secret in {url, password or url}:
            reason = reason.replace(secret, "***")
        if time.monotonic() >= deadline:
            print(f"relay-entrypoint: RELAY_DATABASE_URL did not accept a connection within {wait_s} s: {reason}",
                  file=sys.stderr)
            sys.exit(1)
        time.sleep(1)
    else:
        sys.exit(0)
PY
fi

exec "$@"
