"""Locally built tokenizers: real BPE models with real chat templates, cached on disk; from_pretrained loading."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from openenv_echo.tokenization import FAMILIES, build_tokenizer, load_tokenizer
from openenv_echo.tokenization.corpus import synthetic_corpus
from openenv_echo.tokenization.local_tokenizers import default_cache_dir


def test_families_are_real_fast_tokenizers_with_templates(toks: dict[str, Any]) -> None:
    from transformers import PreTrainedTokenizerFast

    assert set(toks) == set(FAMILIES) == {"qwen", "llama", "qwen3"}
    for name, tok in toks.items():
        assert isinstance(tok, PreTrainedTokenizerFast)
        assert len(tok) == 4096
        assert tok.name_or_path == f"local:{name}"
        text = tok.apply_chat_template(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ls"}], tokenize=False
        )
        assert "hi" in text and "ls" in text


def test_qwen_family_is_byte_level_chatml(toks: dict[str, Any]) -> None:
    tok = toks["qwen"]
    assert tok.bos_token is None and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    text = 'naïve 日本語 🚀\n\t{"a": [1, 2]}'
    ids = tok(text).input_ids
    assert tok.decode(ids) == text  # byte-level: lossless, no BOS
    assert tok.convert_tokens_to_ids("<|im_start|>") in tok.all_special_ids
    rendered = tok.apply_chat_template([{"role": "tool", "content": "out"}], tokenize=False)
    assert rendered == "<|im_start|>user\n<tool_response>\nout\n</tool_response><|im_end|>\n"


def test_llama_family_is_sentencepiece_style_with_bos(toks: dict[str, Any]) -> None:
    tok = toks["llama"]
    assert tok.bos_token == "<s>" and tok.eos_token == "<|eot_id|>" and tok.pad_token is None
    ids = tok("hello world").input_ids
    assert ids[0] == tok.bos_token_id  # BOS from the post-processor
    pieces = tok.convert_ids_to_tokens(ids)
    assert any(p.startswith("\u2581") for p in pieces)  # Metaspace word marker
    # byte fallback: a character the corpus never had still round-trips through <0x..> pieces
    rare = "\U0001f9ec"
    rare_ids = tok(rare, add_special_tokens=False).input_ids
    assert any(p.startswith("<0x") for p in tok.convert_ids_to_tokens(rare_ids))
    assert tok.decode(rare_ids) == rare
    text = tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|start_header_id|>ipython<|end_header_id|>\n\nx<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_qwen3_template_drops_past_thinking(toks: dict[str, Any]) -> None:
    tok = toks["qwen3"]
    a = {"role": "assistant", "content": "<think>\nplan\n</think>\n\nls"}
    last = tok.apply_chat_template([{"role": "user", "content": "u"}, a], tokenize=False)
    past = tok.apply_chat_template(
        [{"role": "user", "content": "u"}, a, {"role": "tool", "content": "o"}], tokenize=False
    )
    assert "plan" in last and "plan" not in past
    assert not past.startswith(last)


def test_build_caches_on_disk_and_keys_by_params(tmp_path: Path) -> None:
    corpus = synthetic_corpus(n_docs=300, seed=3, include_stdlib=False)
    tok = build_tokenizer("qwen", corpus=corpus, vocab_size=700, cache_dir=tmp_path)
    dirs = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert len(dirs) == 1 and (dirs[0] / "tokenizer.json").is_file() and (dirs[0] / "chat_template.jinja").is_file()
    assert len(tok) <= 700
    again = build_tokenizer("qwen", corpus=corpus, vocab_size=700, cache_dir=tmp_path)
    assert again is tok  # memoized in-process
    build_tokenizer("qwen", corpus=corpus, vocab_size=800, cache_dir=tmp_path)
    build_tokenizer("qwen", corpus=corpus + ["more text"], vocab_size=700, cache_dir=tmp_path)
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 3
    assert str(dirs[0]) == tok.name_or_path  # custom builds are named by their directory


def test_cache_dir_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENENV_ECHO_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "tokenizers"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"family": "gpt5"}, "unknown tokenizer family"),
        ({"family": "qwen", "vocab_size": 10}, "vocab_size"),
        ({"family": "qwen", "vocab_size": "4096"}, "vocab_size"),
        ({"family": "qwen", "corpus": []}, "corpus"),
        ({"family": "qwen", "corpus": ["", ""]}, "corpus"),
    ],
)
def test_build_rejects_bad_input(kwargs: dict[str, Any], match: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=match):
        build_tokenizer(cache_dir=tmp_path, **kwargs)


def test_load_tokenizer_from_saved_files_offline(
    toks: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for family in ("qwen", "llama"):
        src = toks[family]
        src.save_pretrained(tmp_path / family)
        tok = load_tokenizer(tmp_path / family)
        assert tok.chat_template == src.chat_template
        assert tok("a b\nc").input_ids == src("a b\nc").input_ids
        msgs = [{"role": "user", "content": "x"}]
        assert tok.apply_chat_template(msgs, tokenize=False) == src.apply_chat_template(msgs, tokenize=False)


def test_load_tokenizer_local_names_and_errors(toks: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_tokenizer("local:qwen") is toks["qwen"]
    with pytest.raises(ValueError, match="unknown tokenizer family"):
        load_tokenizer("local:nope")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OSError, match="HF_HUB_OFFLINE is set"):
        load_tokenizer("some-org/not-a-local-model")
    assert os.environ["HF_HUB_OFFLINE"] == "1"
