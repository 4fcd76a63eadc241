"""SkyRL's local Tinker-API server (``skyrl.tinker``: FastAPI + a JAX engine, on CPU) for recipes and tests.

``LocalTinkerServer(model_dir)`` starts it in a child process on a free loopback port with a LoRA-capable JAX
engine over ``model_dir`` (a Hugging Face Qwen3/Llama3 checkpoint; ``tiny_checkpoint`` builds one offline),
waits until it answers, and stops the process group on exit. Point ``tinker.ServiceClient(base_url=...)`` at
``server.base_url``.

One part is ours: the launch. ``python -m skyrl.tinker.api`` must itself be started by ``uv run`` and starts its
engine with ``uv run --extra tinker --extra jax -m skyrl.tinker.engine <args>``. ``main`` (``python -m
openenv_echo.testing.tinker_server <same args>``) runs SkyRL's API app unchanged but starts the same engine
module with the same arguments (SkyRL's ``config_to_argv``) by this interpreter, so no ``uv`` project is needed.
Both run under ``openenv_echo.providers.parent_watch``: a killed recipe (SIGKILL, a test runner's timeout) takes
the API server and its engine with it, and a killed API server takes its engine.

Found on skyrl 0.4.0's JAX backend (``skyrl/backends/jax.py``): a datum's loss is divided by the sum of its
``weights`` (all ones when a datum has none) and the step's gradient is the mean over datums, whereas Tinker's
service documents per-token sums. The per-token losses it reports (``elementwise_loss``) are the sum-convention
ones, so a batch's reported loss can be checked exactly; the gradient scale cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from ..providers.parent_watch import guarded

BACKEND_CONFIG: dict[str, Any] = {"max_lora_adapters": 8, "max_lora_rank": 8}
"""The JAX engine's ``--backend-config`` here: eight adapters, so several training clients (each with its sampling
copy) can share one server, e.g. a recipe run per λ."""


def tiny_checkpoint(path: str | os.PathLike[str], tokenizer: Any, *, seed: int = 0, hidden: int = 32) -> Path:
    """A randomly initialised tiny ``Qwen3ForCausalLM`` for ``tokenizer`` saved with it at ``path`` (no download);
    SkyRL's JAX engine loads Qwen3/Llama3 safetensors checkpoints."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden // 2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    out = Path(path)
    Qwen3ForCausalLM(cfg).float().save_pretrained(out)  # type: ignore[no-untyped-call]
    tokenizer.save_pretrained(out)
    return out


def _free_port() -> int:
    from ..server.background import free_port

    return int(free_port("127.0.0.1"))


class LocalTinkerServer:
    """SkyRL's Tinker-API server for ``model_dir`` in a child process group (API + engine), state in a temp dir."""

    def __init__(self, model_dir: str | os.PathLike[str], *, startup_timeout_s: float = 300.0) -> None:
        self.model_dir = str(model_dir)
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self.base_url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def log_path(self) -> Path:
        if self._tmp is None:
            raise RuntimeError("the server is not started")
        return Path(self._tmp.name) / "server.log"

    def command(self) -> list[str]:
        assert self._tmp is not None
        state = Path(self._tmp.name)
        return guarded(
            sys.executable,
            __name__,
            "--base-model",
            self.model_dir,
            "--backend",
            "jax",
            "--backend-config",
            json.dumps(BACKEND_CONFIG),
            "--database-url",
            f"sqlite:///{state / 'tinker.db'}",
            "--checkpoints-base",
            str(state / "checkpoints"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        )

    def start(self) -> str:
        self._tmp = tempfile.TemporaryDirectory(prefix="openenv-echo-tinker-")
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the Tinker-API server exited ({self._proc.returncode}):\n{self.logs()}")
            try:
                if httpx.get(f"{self.base_url}/api/v1/healthz", timeout=2.0).status_code == 200:
                    return self.base_url
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"the Tinker-API server did not answer within {self.startup_timeout_s} s")

    def logs(self, tail: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-tail:])
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LocalTinkerServer:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m skyrl.tinker.api`` with the engine started by this interpreter (see the module docstring)."""
    import uvicorn
    from skyrl.tinker import api
    from skyrl.tinker.config import EngineConfig, add_model, config_to_argv

    def engine_command(parent_cmd: list[str], engine_config: Any) -> list[str]:
        return guarded(sys.executable, "skyrl.tinker.engine", *config_to_argv(engine_config))

    api._build_uv_run_cmd_engine = engine_command
    parser = argparse.ArgumentParser(description="SkyRL's Tinker-API server, engine started without uv")
    add_model(parser, EngineConfig)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    fields = {k: v for k, v in vars(args).items() if k in EngineConfig.model_fields}
    api.app.state.engine_config = EngineConfig.model_validate(fields)
    uvicorn.run(api.app, host=args.host, port=args.port, log_level="warning")


__all__ = ["BACKEND_CONFIG", "LocalTinkerServer", "main", "tiny_checkpoint"]

if __name__ == "__main__":
    main()
