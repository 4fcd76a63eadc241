"""``DockerProvider``: an environment server in a hardened Docker container, reached on a loopback port.

The container is started the way OpenEnv's validator starts subjects (``--user 65532:65532 --read-only
--cap-drop ALL --security-opt no-new-privileges --pids-limit 256``, a tmpfs on /tmp, port 8000 published on
127.0.0.1 only), so an image that works here also passes ``openenv validate``'s runtime checks. Uses the ``docker``
Python SDK (extra ``openenv-echo[docker]``).
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from ..server.env_spec import EnvSpec
from ..server.limits import ServerLimits
from .base import DEFAULT_TAIL, RUNNING, ProviderError, ServerProvider, tail_lines

CONTAINER_PORT = 8000
LABEL = "io.openenv-echo.provider"
DEFAULT_BASE_IMAGE = "python:3.11-slim"
LOCAL_BASE_IMAGE = "openenv-echo/base:bookworm-py311"  # scripts/docker/build-base-image.sh
_BUILD_TAIL = 200


def docker_client(timeout_s: float = 120.0) -> Any:
    """A connected ``docker.DockerClient`` (from DOCKER_HOST etc.), or ``ProviderError`` saying how to get one."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ProviderError("the docker SDK is not installed: pip install 'openenv-echo[docker]'") from e
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
        return client
    except Exception as e:
        raise ProviderError(
            f"Docker engine not reachable ({os.environ.get('DOCKER_HOST', 'unix:///var/run/docker.sock')}): {e}. "
            "Start one (as root: scripts/docker/start-dockerd.sh)."
        ) from e


def engine_problem(timeout_s: float = 10.0) -> str | None:
    """None when a Docker engine answers a ping within ``timeout_s`` (on a fresh connection), else what is wrong."""
    try:
        docker_client(timeout_s=timeout_s).close()
    except ProviderError as e:
        return str(e)
    return None


def engine_available() -> bool:
    return engine_problem() is None


def repo_root() -> Path:
    """The openenv-echo checkout this package runs from (needed as the env images' build context)."""
    candidates = [Path(__file__).resolve().parents[2], *Path.cwd().resolve().parents, Path.cwd().resolve()]
    for root in candidates:
        if (root / "pyproject.toml").is_file() and (root / "envs").is_dir() and (root / "openenv_echo").is_dir():
            return root
    raise ProviderError("cannot find the openenv-echo repository root (pyproject.toml + envs/ + openenv_echo/)")


def env_dockerfile(env_name: str, root: Path | None = None) -> Path:
    """``envs/<env_name>_env/server/Dockerfile`` of the checkout."""
    path = (root or repo_root()) / "envs" / f"{env_name}_env" / "server" / "Dockerfile"
    if not path.is_file():
        raise ProviderError(f"no Dockerfile for environment {env_name!r} (expected {path})")
    return path


class DockerProvider(ServerProvider):
    """Run ``image`` (building it first when ``build_context`` is given) and serve it on ``127.0.0.1:<port>``.

    - ``build_context``/``dockerfile``/``build_args``: ``docker build`` before starting (``dockerfile`` may be
      absolute or relative to the context; the context's ``.dockerignore`` applies). Without a context, the image
      must exist locally or be pullable (``pull``: "missing" | "always" | "never").
    - ``env``: container environment; ``limits`` (``ServerLimits`` fields) become ``OPENENV_ECHO_*`` variables.
    - ``hardened``: OpenEnv validator flags (uid 65532, read-only root, tmpfs /tmp, no capabilities,
      no-new-privileges, pids limit). ``command`` overrides the image's CMD.
    - ``host_port=None``: Docker picks a free host port (bound to 127.0.0.1 only).
    - ``docker_socket``: bind-mount this Docker engine socket at ``/var/run/docker.sock`` and add its group (the
      shell env's server starts a container per episode): whoever controls the server controls that engine.
    """

    def __init__(
        self,
        image: str,
        *,
        build_context: Path | str | None = None,
        dockerfile: Path | str | None = None,
        build_args: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        name: str | None = None,
        host: str = "127.0.0.1",
        host_port: int | None = None,
        command: list[str] | str | None = None,
        pull: Literal["missing", "always", "never"] = "missing",
        hardened: bool = True,
        pids_limit: int = 256,
        tmpfs_mb: int = 256,
        memory_mb: int | None = None,
        cpus: float | None = None,
        startup_timeout_s: float = 60.0,
        remove: bool = True,
        labels: Mapping[str, str] | None = None,
        on_build_line: Callable[[str], None] | None = None,
        client: Any = None,
        docker_socket: str | None = None,
        **limits: Any,
    ) -> None:
        super().__init__()
        if not image or not isinstance(image, str):
            raise ValueError("image must be a non-empty image reference")
        if pull not in ("missing", "always", "never"):
            raise ValueError(f"pull must be 'missing', 'always' or 'never', not {pull!r}")
        if name is not None and not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", name):
            raise ValueError(f"invalid container name {name!r}")
        if build_context is None and dockerfile is not None:
            raise ValueError("dockerfile needs build_context")
        self.image = image
        self.build_context = Path(build_context).resolve() if build_context is not None else None
        if self.build_context is not None and not self.build_context.is_dir():
            raise ValueError(f"build_context {self.build_context} is not a directory")
        self.dockerfile = Path(dockerfile) if dockerfile is not None else None
        self.build_args = {k: str(v) for k, v in (build_args or {}).items()}
        self.limits = ServerLimits(**limits) if limits else None
        self.env = dict(env or {})
        self.name = name or f"openenv-echo-{_slug(image)}-{uuid.uuid4().hex[:8]}"
        self.host = host
        self.host_port = host_port
        self.command = command
        self.pull = pull
        self.hardened = hardened
        self.pids_limit = pids_limit
        self.tmpfs_mb = tmpfs_mb
        self.memory_mb = memory_mb
        self.cpus = cpus
        self.startup_timeout_s = startup_timeout_s
        self.remove = remove
        self.labels = {LABEL: "docker", **dict(labels or {})}
        self.on_build_line = on_build_line
        self.label = f"container {self.name}"
        self.image_id: str | None = None
        self.build_log: deque[str] = deque(maxlen=_BUILD_TAIL)
        self.docker_socket = docker_socket
        self._client = client
        self._container: Any = None
        self._final_logs = ""
        self._final_status: str | None = None

    @classmethod
    def for_env(
        cls,
        spec: EnvSpec,
        *,
        root: Path | str | None = None,
        base_image: str | None = None,
        tag: str | None = None,
        build: bool = True,
        **kwargs: Any,
    ) -> DockerProvider:
        """The image of a registered env (``spec_of("terminal")`` from ``openenv_echo.envs``), built from the
        checkout's ``envs/<env>_env/server/Dockerfile`` with the repo root as context. ``base_image`` (else env var
        ``BASE_IMAGE``, else the Dockerfile's default python:3.11-slim) becomes the ``BASE_IMAGE`` build arg. An env
        whose sessions need a Docker engine (``shell``) gets this host's engine socket (``docker_socket``) and the
        base image for its tasks' images."""
        root_path = Path(root).resolve() if root is not None else repo_root()
        dockerfile = env_dockerfile(spec.name, root_path)
        base = base_image or os.environ.get("BASE_IMAGE")
        build_args = dict(kwargs.pop("build_args", None) or {})
        if base:
            build_args.setdefault("BASE_IMAGE", base)
        if spec.needs_docker:
            kwargs.setdefault("docker_socket", "/var/run/docker.sock")
            if base:
                kwargs["env"] = {"BASE_IMAGE": base, **dict(kwargs.get("env") or {})}
        return cls(
            tag or f"openenv-echo/{spec.name}:latest",
            build_context=root_path if build else None,
            dockerfile=dockerfile if build else None,
            build_args=build_args,
            **kwargs,
        )

    # -- docker client ------------------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client

    # -- image --------------------------------------------------------------------------------------------------
    def build(self) -> str:
        """``docker build`` the image from ``build_context``; returns its id. Build errors carry the build log."""
        if self.build_context is None:
            raise ProviderError(f"{self.image}: no build_context to build from")
        dockerfile = None
        if self.dockerfile is not None:
            path = self.dockerfile if self.dockerfile.is_absolute() else self.build_context / self.dockerfile
            if not path.is_file():
                raise ProviderError(f"Dockerfile {path} not found")
            try:
                dockerfile = str(path.resolve().relative_to(self.build_context))
            except ValueError:
                dockerfile = str(path.resolve())  # outside the context: the SDK ships it alongside
        self.build_log.clear()
        try:
            stream = self.client.api.build(
                path=str(self.build_context), dockerfile=dockerfile, tag=self.image, buildargs=self.build_args,
                rm=True, forcerm=True, decode=True, labels={LABEL: "docker"},
            )  # fmt: skip
            for chunk in stream:
                if "error" in chunk:
                    raise ProviderError(
                        f"docker build of {self.image} failed: {chunk['error'].strip()}",
                        logs="\n".join(self.build_log), source=f"build of {self.image}",
                    )  # fmt: skip
                text = chunk.get("stream")
                if text:
                    for line in text.splitlines():
                        if line.strip():
                            self.build_log.append(line)
                            if self.on_build_line is not None:
                                self.on_build_line(line)
        except ProviderError:
            raise
        except Exception as e:
            raise ProviderError(
                f"docker build of {self.image} failed: {e}",
                logs="\n".join(self.build_log),
                source=f"build of {self.image}",
            ) from e
        self.image_id = self.client.api.inspect_image(self.image)["Id"]
        return self.image_id

    def ensure_image(self) -> str:
        """Build (with a context), else use the local image or pull it according to ``pull``."""
        if self.build_context is not None:
            return self.build()
        import docker.errors

        have = None
        try:
            have = self.client.images.get(self.image)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.APIError as e:
            raise ProviderError(f"cannot inspect image {self.image}: {e}") from e
        if have is None or self.pull == "always":
            if self.pull == "never" and have is None:
                raise ProviderError(f"image {self.image} not found locally and pull='never'")
            try:
                have = self.client.images.pull(self.image)
            except docker.errors.APIError as e:
                if have is None:
                    raise ProviderError(
                        f"image {self.image} not found locally and could not be pulled: {e.explanation or e}"
                    ) from e
        image_id: str = have.id
        self.image_id = image_id
        return image_id

    # -- ServerProvider -----------------------------------------------------------------------------------------
    def _launch(self) -> str:
        import docker.errors

        image_id = self.ensure_image()
        self._final_logs, self._final_status = "", None
        try:
            self._container = self.client.containers.create(image_id, **self._run_options())
        except docker.errors.APIError as e:
            raise ProviderError(f"cannot create {self.label} from {self.image}: {e.explanation or e}") from e
        RUNNING.add(self)
        try:
            self._container.start()
        except docker.errors.APIError as e:
            err = ProviderError(f"cannot start {self.label}: {e.explanation or e}", logs=self.logs(), source=self.label)
            self.stop()
            raise err from e
        return f"http://{self.host}:{self._published_port()}"

    def _run_options(self) -> dict[str, Any]:
        environment = dict(self.env)
        if self.limits is not None:
            for key, value in self.limits.model_dump().items():
                environment[f"OPENENV_ECHO_{key.upper()}"] = "none" if value is None else str(value)
        binding = (self.host,) if self.host_port is None else (self.host, self.host_port)
        options: dict[str, Any] = {
            "name": self.name,
            "command": self.command,
            "environment": environment,
            "labels": self.labels,
            "ports": {f"{CONTAINER_PORT}/tcp": binding},
            "init": True,  # reaps children of envs that spawn processes (terminal)
            "stop_signal": "SIGTERM",
            "log_config": {"type": "json-file", "config": {"max-size": "1m", "max-file": "1"}},
        }
        if self.hardened:
            options.update(
                user="65532:65532",
                read_only=True,
                tmpfs={"/tmp": f"rw,nosuid,nodev,size={self.tmpfs_mb}m,mode=1777"},
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=self.pids_limit,
            )
        if self.docker_socket is not None:
            options["volumes"] = {self.docker_socket: {"bind": "/var/run/docker.sock", "mode": "rw"}}
            options["group_add"] = [
                str(os.stat(self.docker_socket).st_gid if os.path.exists(self.docker_socket) else 0)
            ]
        if self.memory_mb is not None:
            options.update(mem_limit=f"{self.memory_mb}m", memswap_limit=f"{self.memory_mb}m")
        if self.cpus is not None:
            options["nano_cpus"] = int(self.cpus * 1e9)
        return options

    def _published_port(self) -> int:
        deadline = time.monotonic() + 5.0
        while True:
            self._container.reload()
            bindings = (self._container.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(
                f"{CONTAINER_PORT}/tcp"
            )
            if bindings:
                return int(bindings[0]["HostPort"])
            self._raise_if_dead("exited before its port was published")
            if time.monotonic() > deadline:
                raise ProviderError(f"{self.label}: Docker published no host port for {CONTAINER_PORT}/tcp",
                                    logs=self.logs(), source=self.label)  # fmt: skip
            time.sleep(0.05)

    def _terminate(self) -> None:
        import docker.errors

        container, self._container = self._container, None
        RUNNING.discard(self)
        if container is None:
            return
        try:
            self._final_logs = _decode(container.logs(tail=_BUILD_TAIL))
            self._final_status = container_status(container)
        except docker.errors.APIError:
            pass
        try:
            container.stop(timeout=5)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            pass
        if self.remove:
            try:
                container.remove(force=True)
            except docker.errors.APIError:
                pass

    def logs(self, tail: int = DEFAULT_TAIL) -> str:
        import docker.errors

        if self._container is None:
            return tail_lines(self._final_logs, tail)
        try:
            return _decode(self._container.logs(tail=tail if tail > 0 else "all"))
        except docker.errors.APIError:
            return tail_lines(self._final_logs, tail)

    def exit_status(self) -> str | None:
        if self._container is None:
            return self._final_status or "not running"
        return container_status(self._container)

    # -- extras -------------------------------------------------------------------------------------------------
    @property
    def container(self) -> Any:
        """The ``docker.models.containers.Container`` while started (None otherwise)."""
        return self._container

    def health_status(self) -> str | None:
        """Docker's HEALTHCHECK verdict (starting / healthy / unhealthy), None if the image has none."""
        if self._container is None:
            return None
        self._container.reload()
        health = self._container.attrs.get("State", {}).get("Health")
        return health.get("Status") if health else None


def container_status(container: Any) -> str | None:
    """None while ``container`` runs; else how it ended (state, exit code, OOM kill, error)."""
    import docker.errors

    try:
        container.reload()
    except docker.errors.NotFound:
        return "container was removed"
    state = container.attrs.get("State", {})
    if state.get("Running") or state.get("Status") in ("created", "running", "restarting"):
        return None
    text = f"container {state.get('Status', 'stopped')} with code {state.get('ExitCode')}"
    if state.get("OOMKilled"):
        text += " (OOM killed)"
    if state.get("Error"):
        text += f": {state['Error']}"
    return text


def _decode(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def _slug(image: str) -> str:
    base = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", base)[:40] or "env"
