"""A CPU stand-in for the token endpoint prime-rl's vLLM serves: ``POST /inference/v1/generate`` and
``GET /v1/models``, answered by a Hugging Face causal LM.

verifiers' ``TrainClient`` tokenizes prompts itself (a ``renderers`` renderer), sends the ids to that endpoint and
gets back sampled ids with their log-probs: token-in-token-out, which is what a trainer needs. prime-rl's engine
is vLLM (``prime_rl/inference/vllm/serving_tokens.py`` over vLLM's ``ServingTokens``) and needs a GPU; this app
speaks the same wire (the request fields the renderers client sends, the response fields it reads) so that the
rest of the stack — verifiers' interception server, ``TrainClient``, the renderer, the trace graph — runs
unchanged on a CPU. It is not an inference engine: one request at a time under a lock, no batching, no prefix
cache, no multimodal inputs. The model object is shared, so a trainer that updates it in place serves the new
weights at once (prime-rl's weight broadcast, for free).
"""

from __future__ import annotations

import math
import threading
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..adapters.rollouts import HFSampler


class SamplingParams(BaseModel):
    """The sampling fields the stand-in honours; other vLLM fields (``skip_special_tokens``, ``seed``...) are
    accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, gt=0.0, description="> 0: greedy decoding is not implemented.")
    stop_token_ids: list[int] = Field(default_factory=list)
    logprobs: int | None = Field(default=None, ge=0)


class GenerateRequest(BaseModel):
    """``POST /inference/v1/generate``: prompt token ids in, sampled ids and their log-probs out."""

    model_config = ConfigDict(extra="allow")

    model: str
    token_ids: list[int] = Field(min_length=1)
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)


def generate_app(
    model: Any,
    tokenizer: Any,
    *,
    model_name: str,
    max_model_len: int = 4096,
    default_max_tokens: int = 64,
) -> Any:
    """The FastAPI app: ``model`` (a causal LM with ``generate``) served as ``model_name``.

    A prompt longer than ``max_model_len``, an id outside the vocabulary or an unknown model name is a 400/404
    with a message; ``max_tokens`` is capped by what is left of ``max_model_len`` (``default_max_tokens`` when
    the request sets none)."""
    from fastapi import FastAPI, HTTPException

    from ..server import ServerLimits

    if max_model_len < 2 or default_max_tokens < 1:
        raise ValueError("max_model_len must be >= 2 and default_max_tokens >= 1")
    vocab = len(tokenizer)
    lock = threading.Lock()
    app = FastAPI(title="openenv-echo generate stand-in", version="1.0.0")
    app.state.limits = ServerLimits()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        card = {"id": model_name, "object": "model", "owned_by": "openenv-echo", "max_model_len": max_model_len}
        return {"object": "list", "data": [card]}

    @app.post("/inference/v1/generate")
    def generate(req: GenerateRequest) -> dict[str, Any]:
        if req.model != model_name:
            raise HTTPException(404, f"model {req.model!r} does not exist (serving {model_name!r})")
        prompt = req.token_ids
        if len(prompt) >= max_model_len:
            raise HTTPException(400, f"prompt of {len(prompt)} tokens leaves no room in max_model_len={max_model_len}")
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise HTTPException(400, f"token ids outside the vocabulary (size {vocab}): {bad[:5]}")
        sp = req.sampling_params
        room = max_model_len - len(prompt)
        max_tokens = min(sp.max_tokens or default_max_tokens, room)
        stops = [t for t in sp.stop_token_ids if 0 <= t < vocab]
        sampler = HFSampler(model, tokenizer, temperature=sp.temperature or 1.0, eos_ids=stops or ())
        with lock:
            ids, logprobs = sampler([prompt], max_tokens)[0]
        if not all(math.isfinite(x) for x in logprobs):
            raise HTTPException(500, "the model produced a non-finite log-prob")
        finish = "stop" if ids and ids[-1] in set(sampler.eos_ids) else "length"
        content = [{"token": f"token_id:{t}", "logprob": float(lp)} for t, lp in zip(ids, logprobs)]
        return {
            "request_id": f"gen-{uuid.uuid4().hex}",
            "choices": [{"index": 0, "token_ids": ids, "logprobs": {"content": content}, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt) + len(ids),
            },
        }

    return app


__all__ = ["GenerateRequest", "SamplingParams", "generate_app"]
