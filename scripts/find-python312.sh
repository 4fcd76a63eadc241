#!/usr/bin/env bash
# Print the first Python 3.12 interpreter found (PATH, then pyenv's versions), or nothing. The 3.12-only trainer tier
# (SkyRL, its Tinker-API server) runs in .venv-trainers built with it (make setup-trainers).
set -u
ok() { [ -x "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }
for cand in "$(command -v python3.12 2>/dev/null)"; do
  if [ -n "$cand" ] && ok "$cand"; then echo "$cand"; exit 0; fi
done
root="${PYENV_ROOT:-$HOME/.pyenv}"
for cand in $(ls -d "$root"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V -r); do
  if ok "$cand"; then echo "$cand"; exit 0; fi
done
exit 0
