"""``docker-compose.yml`` generated from the env registry: one hardened service per registered env.

``python -m openenv_echo.envs.compose > docker-compose.yml``; ``tests/envs/test_registry.py`` checks the committed
file is in sync.
"""

from __future__ import annotations

from . import ENVIRONMENTS, EnvSpec

HEADER = (
    "# The openenv-echo environments as hardened containers (same flags as OpenEnv's validator).\n"
    "# GENERATED from the env registry (openenv_echo/envs/__init__.py) by `python -m openenv_echo.envs.compose`;\n"
    "# edit the registry or openenv_echo/envs/compose.py, never this file (tests/envs/test_registry.py checks it).\n"
    "#\n"
    "#   scripts/docker/build-wheelhouse.sh                  # offline wheels for the image builds\n"
    "#   BASE_IMAGE=openenv-echo/base:bookworm-py311 docker-compose build     # default BASE_IMAGE: python:3.11-slim\n"
    "#   docker-compose up -d echo terminal sql             # echo -> 127.0.0.1:8101, terminal -> :8201, sql -> :8301\n"
    "#   DOCKER_GID=$(stat -c %g /var/run/docker.sock) docker-compose up -d shell      # -> :8401 (needs the engine)\n"
    "#   docker-compose up -d --scale echo=3                 # replicas take the next free ports of the range (8102, ...)\n"
    "#   docker-compose port --index=2 echo 8000             # where replica 2 listens\n"
    "#   docker-compose down\n"
    "#\n"
    "# Each service publishes container port 8000 on a host port RANGE bound to 127.0.0.1; Docker gives every replica a\n"
    "# free port from its service's range, so `--scale` never collides (10 replicas per service by default; widen the\n"
    "# range with ECHO_PORTS / TERMINAL_PORTS / SQL_PORTS, e.g. ECHO_PORTS=9000-9099). Works with docker-compose v1\n"
    "# (file format 2.4: pids_limit, init and healthcheck conditions) and with `docker compose` v2.\n"
    "#\n"
    "# The shell service starts one container per episode through the engine's socket, mounted into it: whoever\n"
    "# controls that server controls the engine (root on its host). Give it an engine of its own (rootless dockerd,\n"
    '# or one in a VM; DOCKER_SOCKET=<its socket>): docs/guides/shell-env.md, "Trust".\n'
    'version: "2.4"\n'
    "\n"
    "x-env-service: &env-service\n"
    '  user: "65532:65532"\n'
    "  read_only: true\n"
    "  tmpfs:\n"
    "    - /tmp:rw,nosuid,nodev,size=256m,mode=1777\n"
    "  cap_drop: [ALL]\n"
    '  security_opt: ["no-new-privileges:true"]\n'
    "  pids_limit: 256\n"
    "  init: true\n"
    '  restart: "no"\n'
    "  healthcheck:\n"
    '    test: ["CMD", "python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen(\'http://127.0.0.1:8001/health\', timeout=2).status != 200)"]\n'
    "    interval: 5s\n"
    "    timeout: 3s\n"
    "    retries: 3\n"
    "    start_period: 20s\n"
    "  logging:\n"
    "    driver: json-file\n"
    '    options: {max-size: "1m", max-file: "1"}\n'
    "\n"
)


def service(spec: EnvSpec) -> str:
    """The compose service of one env: its image, its package's Dockerfile, its host port range (and the engine's
    socket for an env that needs one)."""
    return (
        f"  {spec.name}:\n"
        "    <<: *env-service\n"
        f"    image: openenv-echo/{spec.name}:latest\n"
        "    build:\n"
        "      context: .\n"
        f"      dockerfile: envs/{spec.package}/server/Dockerfile\n"
        "      args:\n"
        "        BASE_IMAGE: ${BASE_IMAGE:-python:3.11-slim}\n"
        "    ports:\n"
        f'      - "127.0.0.1:${{{spec.name.upper()}_PORTS:-{spec.ports}}}:8000"\n'
        + (_ENGINE if spec.needs_docker else "")
    )


_ENGINE = (
    "    volumes:\n"
    '      - "${DOCKER_SOCKET:-/var/run/docker.sock}:/var/run/docker.sock"\n'
    "    group_add:\n"
    '      - "${DOCKER_GID:-0}"\n'
    "    environment:\n"
    "      BASE_IMAGE: ${BASE_IMAGE:-python:3.11-slim}  # what the tasks' images are built on\n"
)
"""What a service whose sessions need a Docker engine adds: the engine's socket and its group (see HEADER)."""


def render() -> str:
    return HEADER + "services:\n" + "\n".join(service(s) for s in ENVIRONMENTS.values())


if __name__ == "__main__":
    print(render(), end="")
