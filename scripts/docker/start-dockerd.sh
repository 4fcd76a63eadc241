#!/usr/bin/env bash
# Make sure a Docker engine answers `docker info`; start one in the background if needed.
#
# - installs docker.io + docker-compose (v1) from Debian's apt if dockerd/docker-compose are missing
# - starts `dockerd` as root in the background (log: $DOCKERD_LOG) when no engine answers
# - waits up to $DOCKERD_WAIT_S seconds (default 60) for `docker info`
# - with DOCKERD_PIDFILE set, writes the pid of the dockerd it started there (empty when it started none), so the
#   caller can stop exactly what it started
# - if the engine cannot be started, prints a loud message with the daemon's last log lines and exits 1:
#   callers (scripts/docker/ci-tier.sh, .ci/run) must never treat that as a pass.
set -euo pipefail

DOCKERD_LOG="${DOCKERD_LOG:-/var/log/openenv-echo-dockerd.log}"
WAIT_S="${DOCKERD_WAIT_S:-60}"

log() { printf '[start-dockerd] %s\n' "$*" >&2; }
loud_fail() {
  {
    printf '\n%s\n' "################################################################################"
    printf '# DOCKER ENGINE UNAVAILABLE: %s\n' "$*"
    printf '# The docker tier cannot run. This is a failure, not a skip.\n'
    printf '%s\n' "################################################################################"
    if [[ -f "$DOCKERD_LOG" ]]; then
      printf -- '--- last 40 lines of %s ---\n' "$DOCKERD_LOG"; tail -n 40 "$DOCKERD_LOG"
    fi
  } >&2
  exit 1
}

engine_up() { docker info >/dev/null 2>&1; }

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 && return 0
  apt-get update -q >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v docker >/dev/null || missing+=(docker.io)
if ((${#missing[@]})); then
  [[ $(id -u) -eq 0 ]] || loud_fail "need root to apt-get install ${missing[*]}"
  log "installing ${missing[*]} via apt"
  apt_install $(printf '%s\n' "${missing[@]}" | sort -u) || loud_fail "apt-get install ${missing[*]} failed"
fi

if engine_up; then
  log "engine already running: $(docker version -f '{{.Server.Version}}' 2>/dev/null)"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || loud_fail "no engine running and not root, cannot start dockerd"
if pgrep -x dockerd >/dev/null; then
  log "dockerd process exists but does not answer yet; waiting"
else
  log "starting dockerd (log: $DOCKERD_LOG)"
  mkdir -p "$(dirname "$DOCKERD_LOG")"
  # A stale pid file from a killed daemon blocks a new one.
  if [[ -f /var/run/docker.pid ]] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
  fi
  setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  if [[ -n "${DOCKERD_PIDFILE:-}" ]]; then echo $! >"$DOCKERD_PIDFILE"; fi
fi

for ((i = 0; i < WAIT_S * 2; i++)); do
  if engine_up; then
    log "engine up after ~$((i / 2))s: server $(docker version -f '{{.Server.Version}}' 2>/dev/null)"
    exit 0
  fi
  if ((i > 4)) && ! pgrep -x dockerd >/dev/null; then
    loud_fail "dockerd exited during startup"
  fi
  sleep 0.5
done
loud_fail "dockerd did not answer 'docker info' within ${WAIT_S}s"
