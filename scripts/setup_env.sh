#!/usr/bin/env bash
# Creates .venv from requirements.lock, or does nothing when it is already built from this lock.
# Usage: scripts/setup_env.sh            (idempotent; `make venv` calls it)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
UV_VERSION=0.13.9
STAMP="$VENV/.lock-sha256"
want=$(cat requirements.lock pyproject.toml scripts/setup_env.sh | sha256sum | cut -d' ' -f1)

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi

# TFX 1.16 supports Python 3.9 and 3.10 only: look on PATH, then in pyenv.
is_supported() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] not in {(3, 9), (3, 10)})' 2>/dev/null; }
find_python() {
  local c
  for c in python3.10 python3.9 python3 python; do
    if command -v "$c" >/dev/null && is_supported "$c"; then command -v "$c"; return; fi
  done
  if command -v pyenv >/dev/null; then
    for c in "$(pyenv root)"/versions/3.10*/bin/python "$(pyenv root)"/versions/3.9*/bin/python; do
      if [[ -x "$c" ]] && is_supported "$c"; then echo "$c"; return; fi
    done
  fi
}
PY=$(find_python || true)
if [[ -z "$PY" ]]; then
  echo "error: TFX 1.16 needs Python 3.10 or 3.9 and none was found on PATH or in pyenv; install one (e.g. 'pyenv install 3.10.13' or 'apt-get install python3.10-venv') and re-run." >&2
  exit 1
fi

echo "setting up $VENV with $("$PY" --version) from requirements.lock ..."
rm -rf "$VENV"
# A pip-seeded venv: TFX pip-installs user-code wheels at run time.
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" -r requirements.lock
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --no-deps -e .
echo "$want" > "$STAMP"
echo "$VENV is ready."
