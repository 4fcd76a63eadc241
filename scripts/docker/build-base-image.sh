#!/usr/bin/env bash
# Build a local Python 3.11 base image (Debian bookworm) without any container registry.
#
# Why: Docker Hub / ghcr.io are unreachable here, but the Debian mirror apt uses is reachable. debootstrap builds a
# minimal bookworm root filesystem from that mirror and `docker import` turns it into an image that the env
# Dockerfiles accept as BASE_IMAGE (it has python3.11, venv/ensurepip and pip, like python:3.11-slim).
#
# Usage: scripts/docker/build-base-image.sh [TAG]        (default tag: openenv-echo/base:bookworm-py311)
# Env:   FORCE=1            rebuild even if the tag exists (otherwise the script is a no-op when it does)
#        DEBIAN_MIRROR=URL  override the mirror (default: the one configured for apt, else deb.debian.org)
#        SUITE=bookworm     Debian suite (bookworm ships python3.11)
set -euo pipefail

TAG="${1:-${BASE_IMAGE_TAG:-openenv-echo/base:bookworm-py311}}"
SUITE="${SUITE:-bookworm}"

log() { printf '[build-base-image] %s\n' "$*" >&2; }
die() { printf '\n[build-base-image] ERROR: %s\n\n' "$*" >&2; exit 1; }

command -v docker >/dev/null || die "docker CLI not found (run scripts/docker/start-dockerd.sh first)"
docker info >/dev/null 2>&1 || die "Docker engine not reachable (run scripts/docker/start-dockerd.sh first)"

if [[ "${FORCE:-0}" != "1" ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  log "image $TAG already exists; skipping (FORCE=1 to rebuild)"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || die "debootstrap needs root"
if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap via apt"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; } \
    || die "could not install debootstrap"
fi

# The mirror apt already uses: deb822 *.sources files first ("URIs:" of a stanza whose Suites include $SUITE),
# then one-line sources.list entries, then Debian's own redirector.
detect_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    awk -v suite="$SUITE" '
      BEGIN { RS=""; FS="\n" }
      {
        uris=""; ok=0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/)   { sub(/^URIs:[ \t]*/, "", $i); split($i, u, /[ \t]+/); uris=u[1] }
          if ($i ~ /^Suites:/) { n=split($i, s, /[ \t]+/); for (j = 2; j <= n; j++) if (s[j] == suite) ok=1 }
        }
        if (ok && uris != "" && uris !~ /security/) { print uris; exit }
      }' "$f"
  done | head -n1 | grep . && return 0
  grep -hsE "^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[a-z]+://[^[:space:]]+[[:space:]]+${SUITE}[[:space:]]" \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | sed -E 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//' | awk '{print $1}' | head -n1 | grep . && return 0
  echo "http://deb.debian.org/debian"
}
MIRROR="${DEBIAN_MIRROR:-$(detect_mirror)}"
log "suite=$SUITE mirror=$MIRROR tag=$TAG"

WORK="$(mktemp -d /var/tmp/openenv-echo-rootfs.XXXXXX)"
cleanup() { rm -rf --one-file-system "$WORK"; }
trap cleanup EXIT
ROOTFS="$WORK/rootfs"

start=$(date +%s)
# minbase = essential + apt; python3-venv brings ensurepip's bundled pip/setuptools wheels.
debootstrap --variant=minbase \
  --include=python3,python3-venv,python3-pip,ca-certificates \
  "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
  || { tail -n 30 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
log "debootstrap done in $(( $(date +%s) - start ))s"

# Slim it down and make it behave like python:3.11-slim (a `python` on PATH, UTF-8 locale).
chroot "$ROOTFS" /bin/sh -c '
  set -e
  ln -sf /usr/bin/python3 /usr/local/bin/python
  apt-get clean
  rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /var/log/apt/* \
         /usr/share/doc/* /usr/share/man/* /usr/share/info/* /tmp/* /var/tmp/*
  find /usr/lib/python3* -name __pycache__ -prune -exec rm -rf {} +
'
# The image's apt should use the same mirror (for derived images built on a networked host).
echo "deb $MIRROR $SUITE main" >"$ROOTFS/etc/apt/sources.list"
: >"$ROOTFS/etc/resolv.conf"; : >"$ROOTFS/etc/hostname"

PYVER="$(chroot "$ROOTFS" python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
[[ "$PYVER" == 3.11.* ]] || die "expected python 3.11 in $SUITE, got $PYVER"
chroot "$ROOTFS" python3 -c 'import ensurepip, venv' || die "ensurepip/venv missing in rootfs"

tar --numeric-owner -C "$ROOTFS" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "ENV PYTHON_VERSION=$PYVER" \
  --change 'CMD ["python3"]' \
  --message "debootstrap $SUITE minbase + python $PYVER from $MIRROR" \
  - "$TAG" >/dev/null
log "built $TAG (python $PYVER, $(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')) in $(( $(date +%s) - start ))s"
