#!/usr/bin/env bash
# The docker tier of CI: engine -> base image -> wheelhouse -> the env images -> docker-compose up -> Harbor's CLI
# (scripts/harbor/setup-harbor-cli.sh, when a Python 3.12 exists) -> pytest -m docker tests/containers tests/docs
# (the docs' blocks that need Docker) -> no shell env container left -> teardown. Prints how long each stage took.
#
# Fails (exit != 0) when the Docker engine cannot be started: this tier never passes silently.
# Cleans up what it started: the compose services, the images it built or pulled (any image not present when the
# engine came up) and the dockerd it started; KEEP_DOCKER=1 keeps the images and the engine (faster reruns).
# Env: BASE_IMAGE (default: the local debootstrap image openenv-echo/base:bookworm-py311, built if missing; set it
#      to e.g. python:3.11-slim where a registry is reachable), PYTHON (default .venv/bin/python),
#      COMPOSE_PROJECT (default openenv-echo-ci), PYTEST_ARGS (extra pytest arguments).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[[ -x "$PY" ]] || PY="$(command -v python3)"
LOCAL_BASE="openenv-echo/base:bookworm-py311"
export BASE_IMAGE="${BASE_IMAGE:-$LOCAL_BASE}"
PROJECT="${COMPOSE_PROJECT:-openenv-echo-ci}"
ENVS=($(PYTHONPATH="$ROOT" "$PY" -c "from openenv_echo.envs import ENVIRONMENTS; print(*ENVIRONMENTS)"))  # the env registry

declare -a STAGES=() TIMES=()
tier_start=$(date +%s)
stage() {  # stage NAME CMD...: run, time and record one stage
  local name="$1"; shift
  local t0=$(date +%s.%N)
  printf '\n=== [docker tier] %s ===\n' "$name"
  "$@"
  local dt; dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  STAGES+=("$name"); TIMES+=("$dt")
  printf '=== [docker tier] %s: %ss ===\n' "$name" "$dt"
}
summary() {
  printf '\n=== [docker tier] stage times ===\n'
  local i
  for i in "${!STAGES[@]}"; do printf '  %-28s %8ss\n' "${STAGES[$i]}" "${TIMES[$i]}"; done
  printf '  %-28s %8ss\n' "total" "$(( $(date +%s) - tier_start ))"
}

compose() { docker-compose -p "$PROJECT" -f "$ROOT/docker-compose.yml" "$@"; }

DOCKERD_PIDFILE="$(mktemp)"
export DOCKERD_PIDFILE
IMAGES_BEFORE=""  # image ids present when the engine came up; "" until then
KEEP_DOCKER="${KEEP_DOCKER:-0}"
HARBOR_TMP=""  # a temporary HARBOR_HOME this tier made, removed at teardown
printf '[docker tier] may install (as root, via apt): docker.io docker-compose, if missing\n'
printf '[docker tier] starts: dockerd (if no engine answers), compose project %s\n' "$PROJECT"
printf '[docker tier] builds: %s, images of %s\n' "$BASE_IMAGE" "${ENVS[*]}"
if [[ "$KEEP_DOCKER" == 1 ]]; then
  printf '[docker tier] KEEP_DOCKER=1: images and a started dockerd are kept\n'
else
  printf '[docker tier] at the end: removes the images it added and stops the dockerd it started (KEEP_DOCKER=1 keeps them)\n'
fi

cleanup_started() {  # remove images added since the engine came up, stop a dockerd this tier started
  [[ "$KEEP_DOCKER" == 1 ]] && return 0
  if [[ -n "$IMAGES_BEFORE" ]] && docker info >/dev/null 2>&1; then
    local added
    added=$(comm -13 <(printf '%s\n' "$IMAGES_BEFORE" | sort -u) <(docker images -q --no-trunc | sort -u))
    if [[ -n "$added" ]]; then
      echo "[docker tier] removing $(wc -l <<<"$added") image(s) this tier added"
      # shellcheck disable=SC2086
      docker rmi -f $added >/dev/null 2>&1 || true
    fi
  fi
  local pid
  pid=$(cat "$DOCKERD_PIDFILE" 2>/dev/null || true)
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    echo "[docker tier] stopping the dockerd it started (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$DOCKERD_PIDFILE"
}

teardown() {
  local rc=$?
  if docker info >/dev/null 2>&1; then
    if ((rc != 0)); then
      echo "--- container logs (tier failed) ---"
      compose logs --no-color --tail=40 2>/dev/null || true
    fi
    compose down --remove-orphans --timeout 5 >/dev/null 2>&1 || true
    # untagged leftovers of the env Dockerfiles (build stages, superseded images; both labelled), not anyone else's
    docker image prune -f --filter label=io.openenv-echo.stage=build >/dev/null 2>&1 || true
    docker image prune -f --filter label=io.openenv-echo.image=env >/dev/null 2>&1 || true
  fi
  cleanup_started
  [[ -z "$HARBOR_TMP" ]] || rm -rf "$HARBOR_TMP"
  summary
  if ((rc != 0)); then printf '\n[docker tier] FAILED (exit %d)\n' "$rc" >&2; fi
  exit "$rc"
}
trap teardown EXIT

stage "start dockerd" bash "$ROOT/scripts/docker/start-dockerd.sh"
IMAGES_BEFORE=$(docker images -q --no-trunc | sort -u; echo "-")  # "-": non-empty even with no images
# the shell service starts its episodes' containers through the engine's socket: its group, for the compose service
DOCKER_GID="$(stat -c %g /var/run/docker.sock 2>/dev/null || echo 0)"
export DOCKER_GID

base_image() {
  if [[ "$BASE_IMAGE" == "$LOCAL_BASE" ]]; then
    bash "$ROOT/scripts/docker/build-base-image.sh" "$LOCAL_BASE"
  elif ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    docker pull "$BASE_IMAGE"
  fi
  echo "BASE_IMAGE=$BASE_IMAGE"
}
stage "base image" base_image
stage "wheelhouse" bash "$ROOT/scripts/docker/build-wheelhouse.sh"
for env in "${ENVS[@]}"; do
  stage "build image $env" compose build --build-arg BASE_IMAGE="$BASE_IMAGE" "$env"
done

wait_healthy() {
  compose down --remove-orphans --timeout 5 >/dev/null 2>&1 || true
  compose up -d --no-build "${ENVS[@]}"
  local deadline=$(( $(date +%s) + 90 )) id status all
  while :; do
    all=1
    for id in $(compose ps -q); do
      status=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id")
      [[ "$status" == healthy ]] || all=0
      if [[ "$status" == unhealthy || "$status" == exited || "$status" == dead ]]; then
        echo "container $id is $status"; return 1
      fi
    done
    ((all)) && break
    (( $(date +%s) < deadline )) || { echo "services not healthy within 90s"; return 1; }
    sleep 1
  done
  compose ps
}
stage "compose up (healthy)" wait_healthy

# Harbor's own CLI beside the project (it needs Python >= 3.12 and Compose v2), for tests/containers/test_harbor_cli.py
# (our tasks under Harbor's oracle); HARBOR_HOME, when set, is kept, else a temporary one is removed at teardown.
PY312="$(bash "$ROOT/scripts/find-python312.sh")"
if [[ -n "$PY312" ]]; then
  [[ -n "${HARBOR_HOME:-}" ]] || { HARBOR_TMP="$(mktemp -d)"; HARBOR_HOME="$HARBOR_TMP/harbor"; }
  export HARBOR_HOME OPENENV_ECHO_REQUIRE_HARBOR=1
  stage "harbor CLI" env PYTHON312="$PY312" bash "$ROOT/scripts/harbor/setup-harbor-cli.sh"
else
  echo "[docker tier] no python3.12 found (PATH, pyenv): Harbor's CLI is not set up; tests/containers/test_harbor_cli.py skips, saying so"
fi

export OPENENV_ECHO_REQUIRE_DOCKER=1 OPENENV_ECHO_COMPOSE_PROJECT="$PROJECT"
# shellcheck disable=SC2086
stage "pytest -m docker" "$PY" -m pytest -m docker -q -p no:cacheprovider tests/containers tests/docs ${PYTEST_ARGS:-}

no_shell_containers_left() {  # every episode's container is gone: the servers removed them, none leaked
  compose stop --timeout 10 shell >/dev/null 2>&1 || true  # the compose shell server removes its own on shutdown
  local left
  left=$(docker ps -aq --filter label=io.openenv-echo.shell)
  if [[ -n "$left" ]]; then
    echo "containers of the shell env left behind:"; docker ps -a --filter label=io.openenv-echo.shell; return 1
  fi
  echo "no container of the shell env left"
}
stage "no shell containers left" no_shell_containers_left
