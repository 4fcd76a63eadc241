#!/usr/bin/env bash
# Set up Harbor's own CLI beside the project (not in its venv) so our task suite can be run under Harbor:
#   - a Python >= 3.12 venv (Harbor 0.26 requires 3.12) with harbor==$HARBOR_VERSION from PyPI;
#   - the Docker Compose v2 CLI plugin (`docker compose`): Harbor's docker environment drives Compose v2. Debian
#     bookworm only packages Compose v1, so the plugin binary is taken from Debian trixie's `docker-compose` package
#     with apt-get download into a private apt state (the host's apt configuration is not touched) and put into a
#     private DOCKER_CONFIG directory.
# Then: DOCKER_CONFIG=$HARBOR_HOME/docker $HARBOR_HOME/venv/bin/harbor run -p envs/shell_env/tasks -a oracle -e docker
#
# Usage: scripts/harbor/setup-harbor-cli.sh          Env: HARBOR_HOME (default /tmp/openenv-echo-harbor),
#        PYTHON312 (default: python3.12 on PATH, else pyenv's 3.12.x), HARBOR_VERSION (default 0.26.0),
#        DEBIAN_MIRROR (default: the mirror apt uses). Idempotent: a no-op when both are in place.
set -euo pipefail

log() { printf '[setup-harbor-cli] %s\n' "$*" >&2; }
die() { printf '[setup-harbor-cli] ERROR: %s\n' "$*" >&2; exit 1; }

HOME_DIR="${HARBOR_HOME:-/tmp/openenv-echo-harbor}"
VERSION="${HARBOR_VERSION:-0.26.0}"
# the Debian mirror apt already uses (deb822 URIs: or one-line deb entries), as scripts/docker/build-base-image.sh
MIRROR="${DEBIAN_MIRROR:-$(grep -hsoE '^(URIs:[[:space:]]*|deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[a-z]+://[^[:space:]]+' \
  /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
  | grep -v security | grep -oE '[a-z]+://[^[:space:]]+' | head -n1 || true)}"
[[ -n "$MIRROR" ]] || die "no Debian mirror found in apt's sources: set DEBIAN_MIRROR"

mkdir -p "$HOME_DIR/docker/cli-plugins"

if [[ ! -x "$HOME_DIR/venv/bin/harbor" ]]; then
  PY=""
  for c in "${PYTHON312:-}" python3.13 python3.12 "$(pyenv root 2>/dev/null)"/versions/3.1[2-9]*/bin/python3; do
    if [[ -n "$c" ]] && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then PY="$c"; break; fi
  done
  [[ -n "$PY" ]] || die "Harbor needs Python >= 3.12: set PYTHON312"
  log "venv with harbor==$VERSION ($PY)"
  "$PY" -m venv "$HOME_DIR/venv"
  "$HOME_DIR/venv/bin/pip" install -q "harbor==$VERSION"
fi

if ! DOCKER_CONFIG="$HOME_DIR/docker" docker compose version >/dev/null 2>&1; then
  log "Compose v2 plugin from Debian trixie's docker-compose package"
  APT="$HOME_DIR/apt"
  mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/deb"
  echo "deb $MIRROR trixie main" >"$APT/sources.list"
  OPTS=(-o "Dir::Etc::sourcelist=$APT/sources.list" -o "Dir::Etc::sourceparts=/nonexistent"
        -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" -o "APT::Default-Release=trixie")
  apt-get "${OPTS[@]}" update -q >/dev/null
  (cd "$APT/deb" && apt-get "${OPTS[@]}" download docker-compose/trixie >/dev/null 2>&1)
  dpkg-deb -x "$APT"/deb/docker-compose_*.deb "$APT/root"
  cp "$APT/root/usr/libexec/docker/cli-plugins/docker-compose" "$HOME_DIR/docker/cli-plugins/docker-compose"
  DOCKER_CONFIG="$HOME_DIR/docker" docker compose version >/dev/null || die "docker compose plugin does not run"
fi
log "ready: DOCKER_CONFIG=$HOME_DIR/docker $HOME_DIR/venv/bin/harbor"
