#!/usr/bin/env bash
# Fill a local wheelhouse with everything the env images need to `pip install` the project offline.
#
# Why: image builds here cannot reach a package index (containers have no route to PyPI), so the Dockerfiles
# install with `pip install --no-index --find-links /wheelhouse`. The wheels must match the image's interpreter,
# not the host's: CPython 3.11, manylinux x86_64 (glibc <= 2.36, bookworm / python:3.11-slim), so they are fetched
# with explicit --python-version/--platform tags and --only-binary.
#
# Contents: the project's runtime dependencies ([project].dependencies of pyproject.toml, plus the extras listed in
# $WHEELHOUSE_EXTRAS, default "docker": the shell env's server drives the engine; all env images install it) and its
# build backend (setuptools>=77, wheel). The project itself is NOT put here: the Dockerfiles build it from the copied
# source, so an image never runs a stale wheel.
#
# Usage: scripts/docker/build-wheelhouse.sh [OUT_DIR]     (default: .cache/wheelhouse at the repo root)
# Idempotent: skipped when the requirement list is unchanged since the last successful run (FORCE=1 to redo).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-${WHEELHOUSE:-$ROOT/.cache/wheelhouse}}"
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY="$(command -v python3)"; fi
fi
GLIBC_MINOR="${WHEEL_GLIBC_MINOR:-36}"   # bookworm and python:3.11-slim ship glibc 2.36
# pip does not expand a given manylinux tag to older ones, so list every compatible tag explicitly.
PLATFORM_ARGS=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
for ((m = GLIBC_MINOR; m >= 5; m--)); do PLATFORM_ARGS+=(--platform "manylinux_2_${m}_x86_64"); done
PLATFORM="manylinux_2_${GLIBC_MINOR}_x86_64"
PYVER="${WHEEL_PYTHON_VERSION:-3.11}"

log() { printf '[build-wheelhouse] %s\n' "$*" >&2; }

mkdir -p "$OUT"
REQS="$OUT/requirements.txt"
"$PY" - "$ROOT/pyproject.toml" "${WHEELHOUSE_EXTRAS-docker}" >"$REQS.new" <<'EOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
reqs = list(project.get("dependencies", []))
for extra in filter(None, sys.argv[2].replace(",", " ").split()):
    for r in project.get("optional-dependencies", {}).get(extra, []):
        if not r.startswith(project["name"]):
            reqs.append(r)
reqs += ["setuptools>=77", "wheel"]
print("\n".join(sorted(set(reqs))))
EOF

stamp="$(cat "$REQS.new"; echo "$PLATFORM $PYVER")"
if [[ "${FORCE:-0}" != "1" && -f "$OUT/.stamp" && "$(cat "$OUT/.stamp")" == "$stamp" ]] \
   && ls "$OUT"/*.whl >/dev/null 2>&1; then
  rm -f "$REQS.new"
  log "up to date: $(ls "$OUT"/*.whl | wc -l) wheels in $OUT (FORCE=1 to refresh)"
  exit 0
fi
mv "$REQS.new" "$REQS"

log "downloading cp${PYVER/./}/$PLATFORM wheels for: $(tr '\n' ' ' <"$REQS")"
PIP_NO_WARN_SCRIPT_LOCATION=1 "$PY" -m pip download --quiet --disable-pip-version-check \
  --only-binary=:all: --implementation cp --python-version "$PYVER" --abi "cp${PYVER/./}" \
  "${PLATFORM_ARGS[@]}" \
  --dest "$OUT" -r "$REQS" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
printf '%s' "$stamp" >"$OUT/.stamp"
log "$(ls "$OUT"/*.whl | wc -l) wheels ($(du -sh "$OUT" | cut -f1)) in $OUT"
