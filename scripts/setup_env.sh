#!/usr/bin/env bash
# Creates .venv from requirements.lock, or does nothing when it is already built from this lock.
# Usage: scripts/setup_env.sh            (idempotent; `make venv` calls it)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
UV_VERSION=0.13.9
STAMP="$VENV/.lock-sha256"
want=$(cat requirements.lock pyproject.toml scripts/setup_env.sh scripts/compile_bytecode.py \
  | sha256sum | cut -d' ' -f1)

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi

# The one supported Python range is pyproject.toml's requires-python (">=3.10,<3.11": TFX 1.16
# runs on 3.9 and 3.10, this code and the lock need 3.10). Look on PATH, then in pyenv.
RANGE=$(sed -n 's/^requires-python = "\(.*\)"$/\1/p' pyproject.toml)
MINOR=$(sed -n 's/^>=3\.\([0-9]*\),<3\.[0-9]*$/\1/p' <<<"$RANGE")
if [[ -z "$MINOR" || "$RANGE" != ">=3.$MINOR,<3.$((MINOR + 1))" ]]; then
  echo "error: pyproject.toml's requires-python must be one minor version, \">=3.N,<3.N+1\"; it is '$RANGE'" >&2
  exit 1
fi
WANT="3.$MINOR"
is_supported() { "$1" -c "import sys; sys.exit(sys.version_info[:2] != (3, $MINOR))" 2>/dev/null; }
find_python() {
  local c
  for c in "python$WANT" python3 python; do
    if command -v "$c" >/dev/null && is_supported "$c"; then command -v "$c"; return; fi
  done
  if command -v pyenv >/dev/null; then
    for c in "$(pyenv root)"/versions/"$WANT".*/bin/python; do
      if [[ -x "$c" ]] && is_supported "$c"; then echo "$c"; return; fi
    done
  fi
}
PY=$(find_python || true)
if [[ -z "$PY" ]]; then
  echo "error: this project needs Python $WANT (pyproject.toml requires-python '$RANGE') and none was found on PATH or in pyenv; install it (e.g. 'pyenv install $WANT.13' or 'apt-get install python$WANT-venv') and re-run." >&2
  exit 1
fi

echo "setting up $VENV with $("$PY" --version) from requirements.lock ..."
# Said once, here, not on every run's console (README: Python 3.10 is past its end of life).
if [[ "$WANT" == "3.10" ]]; then
  echo "note: Python 3.10 is past its end of life (October 2026: no security fixes); TFX 1.16 runs on no newer Python (README.md)"
fi
rm -rf "$VENV"
# A pip-seeded venv: TFX pip-installs user-code wheels at run time.
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
# --require-hashes: every file must match the lock's sha256 (uv pip compile --generate-hashes).
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --require-hashes -r requirements.lock
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --no-deps -e .
# The .pyc files, made once here: uv writes none by default, and where PYTHONDONTWRITEBYTECODE is
# set (as on this project's CI machines) no process ever writes them. Not uv's --compile-bytecode,
# which also compiles the 7,300 files of tests and tools nothing here imports (10 s more).
"$VENV/bin/python" scripts/compile_bytecode.py
echo "$want" > "$STAMP"
echo "$VENV is ready."
