"""The CPU stand-in for prime-rl's vLLM token endpoint (``generate_app``) on a real loopback server with a tiny real
model: the wire verifiers' renderer client reads, sampler log-probs equal to the model's own, bounded lengths, and
bad requests answered with a 4xx while the server keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch

from openenv_echo.server import BackgroundServer
from openenv_echo.testing.generate_server import generate_app
from openenv_echo.testing.recipes import tiny_causal_lm

MAX_LEN = 64


@pytest.fixture(scope="module")
def served(qwen_tokenizer: Any) -> Iterator[tuple[str, Any]]:
    model = tiny_causal_lm(qwen_tokenizer, seed=1)
    server = BackgroundServer(generate_app(model, qwen_tokenizer, model_name="m", max_model_len=MAX_LEN))
    yield server.start(), model
    server.stop()


def _generate(url: str, body: Any) -> httpx.Response:
    return httpx.post(url + "/inference/v1/generate", json=body, trust_env=False, timeout=60)


def test_models_card_and_sampled_logprobs_are_the_models(served: tuple[str, Any], qwen_tokenizer: Any) -> None:
    url, model = served
    cards = httpx.get(url + "/v1/models", trust_env=False).json()["data"]
    assert cards == [{"id": "m", "object": "model", "owned_by": "openenv-echo", "max_model_len": MAX_LEN}]
    chat = [{"role": "user", "content": "ls"}]
    prompt = list(qwen_tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=False))
    stop = [qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")]
    for _ in range(3):
        body = {"model": "m", "token_ids": prompt, "sampling_params": {"max_tokens": 6, "stop_token_ids": stop}}
        r = _generate(url, body)
        assert r.status_code == 200, r.text
        [choice] = r.json()["choices"]
        ids = choice["token_ids"]
        assert 1 <= len(ids) <= 6 and [c["token"] for c in choice["logprobs"]["content"]] == [
            f"token_id:{t}" for t in ids
        ]
        assert choice["finish_reason"] == ("stop" if ids[-1] in stop else "length")
        assert (ids[-1] in stop) or len(ids) == 6
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
        own = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
        sent = torch.tensor([c["logprob"] for c in choice["logprobs"]["content"]])
        assert torch.allclose(own, sent, atol=1e-4)  # temperature 1: the sampler's log-probs are the model's
    r = _generate(
        url, {"model": "m", "token_ids": list(range(5, 5 + MAX_LEN - 3)), "sampling_params": {"max_tokens": 50}}
    )
    assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) <= 3  # capped by what is left


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "other", "token_ids": [5]}, 404, "does not exist"),
        ({"model": "m", "token_ids": [5, 10**6]}, 400, "outside the vocabulary"),
        ({"model": "m", "token_ids": [-1]}, 400, "outside the vocabulary"),
        ({"model": "m", "token_ids": list(range(5, 5 + MAX_LEN))}, 400, "no room"),
        ({"model": "m", "token_ids": []}, 422, "token_ids"),
        ({"model": "m", "token_ids": [5], "sampling_params": {"temperature": 0}}, 422, "temperature"),
        ({"model": "m", "token_ids": [5], "sampling_params": {"max_tokens": 0}}, 422, "max_tokens"),
        ({"token_ids": [5]}, 422, "model"),
        ("not json", 422, ""),
    ],
)
def test_bad_requests_get_a_clear_4xx_and_the_server_keeps_serving(
    served: tuple[str, Any], body: Any, status: int, words: str
) -> None:
    url, _ = served
    r = (
        httpx.post(url + "/inference/v1/generate", content=body, trust_env=False)
        if isinstance(body, str)
        else _generate(url, body)
    )
    assert r.status_code == status and words in r.text
    assert _generate(url, {"model": "m", "token_ids": [5, 6], "sampling_params": {"max_tokens": 2}}).status_code == 200
