"""OpenEnv's runtime validation (``openenv.validation.run_validation``) for the bundled env packages.

OpenEnv's own Docker validation provider builds ``execution.dockerfile`` with the *package directory* as build
context. The env images of this repo need the ``openenv_echo`` source and the offline wheelhouse, i.e. the repo
root as context, so ``RepoBuildValidationProvider`` builds there (with ``DockerProvider.build``) and then hands the
image to OpenEnv's real launcher (``DockerValidationProvider.start``: uid 65532, read-only root, no capabilities,
no-new-privileges, pids/memory/cpu limits, tmpfs /tmp, ``--network none`` + namespace helper for no-network
packages, /health within the startup deadline). The graders then run exactly as
``openenv validate PKG --level runtime`` would run them. Needs the ``openenv`` package (extra ``test``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..server.env_spec import EnvSpec
from .base import ProviderError
from .docker import DEFAULT_BASE_IMAGE, DockerProvider, docker_client, repo_root


class RepoBuildValidationProvider:
    """An OpenEnv ``ValidationProvider``: repo-root image builds + OpenEnv's hardened docker-local launcher.

    ``no-network`` packages run exactly as OpenEnv runs them (``--network none`` plus a helper container sharing
    only the subject's network namespace, relaying the API through ``docker exec``), and ``runtime.network_policy``
    is measured. OpenEnv pulls its helper (python:3.12-slim) by registry digest; here no registry is needed: the
    helper is a local image with python3 (default: the build's base image), pinned by its immutable image ID.
    Without such an image only ``public`` packages are supported.
    """

    name = "openenv-echo-docker"

    def __init__(
        self,
        root: Path | str | None = None,
        *,
        base_image: str | None = None,
        build_args: dict[str, str] | None = None,
        helper_image: str | None = None,
        client: Any = None,
    ) -> None:
        from openenv.validation.types import ProviderCapability

        self.root = Path(root).resolve() if root is not None else repo_root()
        self.build_args = dict(build_args or {})
        base = base_image or os.environ.get("BASE_IMAGE")
        if base:
            self.build_args.setdefault("BASE_IMAGE", base)
        self._client = client or docker_client()
        self.helper_image_id = self._image_id(helper_image or self.build_args.get("BASE_IMAGE") or DEFAULT_BASE_IMAGE)
        caps = {ProviderCapability.IMAGE_BUILD, ProviderCapability.EXEC}
        if self.helper_image_id is not None:
            caps.add(ProviderCapability.NETWORK_POLICY)
        self.capabilities = frozenset(caps)
        self.supported_network_modes = frozenset({"public", "no-network"} if self.helper_image_id else {"public"})
        self.last_build_log: list[str] = []

    def _image_id(self, ref: str) -> str | None:
        try:
            image_id = self._client.images.get(ref).id
        except Exception:
            return None
        return image_id if re.fullmatch(r"sha256:[0-9a-f]{64}", image_id or "") else None

    def build(self, root: Path, execution: Any) -> str:
        from openenv.validation.providers import StartupError

        package = Path(root).resolve()
        dockerfile = (package / execution.dockerfile).resolve()
        if not dockerfile.is_relative_to(package) or not dockerfile.is_file():
            raise StartupError(f"Dockerfile {execution.dockerfile!r} not found inside {package}")
        env = package.name.removesuffix("_env")
        builder = DockerProvider(
            f"openenv-echo/{env}:validation", build_context=self.root, dockerfile=dockerfile,
            build_args=self.build_args, client=self._client,
        )  # fmt: skip
        try:
            image_id = builder.build()
        except ProviderError as e:
            raise StartupError(f"Image build failed: {e}"[-4096:]) from None
        finally:
            self.last_build_log = list(builder.build_log)
        return image_id

    def start(self, spec: Any) -> Any:
        return _launcher(self.helper_image_id).start(spec)


class EngineSocketValidationProvider(RepoBuildValidationProvider):
    """For packages whose server drives a Docker engine (the shell env): the repo-root build, then the image started
    with OpenEnv's hardening (uid 65532, read-only root, tmpfs /tmp, all capabilities dropped, no-new-privileges,
    pids limit 256, the manifest's memory and CPU) plus the engine's socket and its group (``DockerProvider``'s
    ``docker_socket``), its API on a loopback port. OpenEnv's own launcher never mounts anything, so it cannot run
    such a server. Only ``public`` packages: the server itself is on a bridge network (the containers it starts for
    episodes have none)."""

    name = "openenv-echo-docker-engine-socket"

    def __init__(self, *args: Any, docker_socket: str = "/var/run/docker.sock", **kwargs: Any) -> None:
        from openenv.validation.types import ProviderCapability

        super().__init__(*args, **kwargs)
        self.docker_socket = docker_socket
        self.capabilities = frozenset({ProviderCapability.IMAGE_BUILD, ProviderCapability.EXEC})
        self.supported_network_modes = frozenset({"public"})

    def start(self, spec: Any) -> Any:
        from openenv.validation.providers import StartupError

        env = dict(spec.env_vars)
        if "BASE_IMAGE" in self.build_args:
            env.setdefault("BASE_IMAGE", self.build_args["BASE_IMAGE"])
        provider = DockerProvider(
            spec.image_ref, client=self._client, name=f"openenv-validation-{spec.run_id}", env=env,
            memory_mb=spec.resources.memory_mb, cpus=spec.resources.cpu, docker_socket=self.docker_socket,
            startup_timeout_s=spec.startup_timeout_s, pull="never",
        )  # fmt: skip
        try:
            provider.start()
        except ProviderError as e:
            raise StartupError(f"{e}\n{e.logs}"[-4096:]) from None
        return _SocketSubject(provider)


class _SocketSubject:
    """OpenEnv's ``RunningSubject`` over a ``DockerProvider`` container."""

    def __init__(self, provider: DockerProvider) -> None:
        self.provider = provider
        self.base_url = provider.base_url

    def inspect(self) -> dict[str, Any]:
        container = self.provider.container
        container.reload()
        host = container.attrs.get("HostConfig", {})
        return {
            "container_id": container.id,
            "image_id": container.attrs.get("Image"),
            "running": container.attrs.get("State", {}).get("Running", False),
            "user": container.attrs.get("Config", {}).get("User"),
            "limits": {k: host.get(k) for k in ("Memory", "NanoCpus", "PidsLimit", "ReadonlyRootfs", "CapDrop")},
        }

    def logs(self, max_bytes: int = 65536) -> str:
        return self.provider.logs(tail=1000)[-max_bytes:]

    def exec(self, argv: list[str], timeout_s: float) -> Any:
        import time

        from openenv.validation.providers import ExecResult

        began = time.monotonic()
        code, out = self.provider.container.exec_run(argv, demux=True)
        stdout, stderr = (part.decode("utf-8", "replace") if part else "" for part in out)
        return ExecResult(code, stdout, stderr, time.monotonic() - began)

    def stop(self) -> None:
        self.provider.stop()


def _launcher(helper_image_id: str | None) -> Any:
    """OpenEnv's ``DockerValidationProvider`` with a local helper image (pinned by image ID, never pulled)."""
    from openenv.validation.providers.docker import DockerValidationProvider

    if helper_image_id is None:
        return DockerValidationProvider()
    launcher = DockerValidationProvider.__new__(DockerValidationProvider)
    # the constructor insists on a registry digest because it may pull the helper; an image ID is as immutable
    launcher.build_timeout_s = 600.0
    launcher.max_context_bytes = 2**30
    launcher.helper_image = helper_image_id
    return launcher


def validate_runtime(
    spec: EnvSpec, *, root: Path | str | None = None, base_image: str | None = None, client: Any = None
) -> Any:
    """Run OpenEnv's static + runtime validation of the env package of ``spec`` (``envs/<name>_env`` of the
    checkout) in Docker (an env whose server drives the engine, ``shell``, with ``EngineSocketValidationProvider``);
    returns OpenEnv's ``ValidationReportV2`` (``.verdict``, ``.results``)."""
    from openenv.validation import Level, run_validation

    repo = Path(root).resolve() if root is not None else repo_root()
    path = repo / "envs" / spec.package
    if not (path / "openenv.yaml").is_file():
        raise ProviderError(f"{path} is not an OpenEnv package (no openenv.yaml)")
    kind = EngineSocketValidationProvider if spec.needs_docker else RepoBuildValidationProvider
    provider = kind(repo, base_image=base_image, client=client)
    return run_validation(path, max_level=Level.RUNTIME, provider=provider)
