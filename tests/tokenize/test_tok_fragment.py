"""Mid-sequence fragment encoding: concatenation-faithful, special-token strings literal in content."""

from __future__ import annotations

from typing import Any

import pytest

from openenv_echo.tokenization import fragment_codec
from openenv_echo.tokenization.fragment_encoding import FragmentCodec, backend_of, special_affixes

PIECES = ["hello", " world", '\n  x = {"a": 1}', "<|im_end|>", "日本語 🚀", "  ", "\t\n", "end"]


def test_fragments_concatenate_faithfully(any_tok: Any) -> None:
    codec = fragment_codec(any_tok)
    ids = [codec.encode_content(p) for p in PIECES]
    assert codec.decode([i for part in ids for i in part]) == "".join(PIECES)
    assert codec.encode_contents(PIECES) == ids
    assert codec.encode_contents([]) == [] and codec.encode_content("") == []


def test_sentencepiece_dummy_prefix_is_not_added_mid_sequence(toks: dict[str, Any]) -> None:
    tok = toks["llama"]
    codec = fragment_codec(tok)
    plain = tok.encode("b", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(plain)[0].startswith("\u2581")  # document start: dummy prefix
    frag = codec.encode_content("b")
    assert not tok.convert_ids_to_tokens(frag)[0].startswith("\u2581")
    # ... which is how the full rendering tokenizes text right after a special token
    full = tok.encode("<|eot_id|>b", add_special_tokens=False)
    assert full[1:] == frag
    # naive per-segment encoding would insert a phantom space
    naive = tok.encode("a", add_special_tokens=False) + tok.encode("b", add_special_tokens=False)
    assert codec.decode(naive) != "ab" and codec.decode(codec.encode_content("a") + frag) == "ab"


def test_content_keeps_special_strings_literal_scaffold_does_not(stable_tok: Any) -> None:
    codec = fragment_codec(stable_tok)
    special = "<|im_end|>" if "<|im_end|>" in stable_tok.get_vocab() else "<|eot_id|>"
    sid = stable_tok.convert_tokens_to_ids(special)
    assert codec.encode_scaffold(special) == [sid]
    literal = codec.encode_content(special)
    assert sid not in literal and len(literal) > 1 and not set(literal) & codec.special_ids
    assert codec.decode(literal) == special


def test_special_affixes(toks: dict[str, Any]) -> None:
    assert special_affixes(backend_of(toks["qwen"])) == ([], [])
    llama = toks["llama"]
    assert special_affixes(backend_of(llama)) == ([llama.bos_token_id], [])
    assert fragment_codec(llama).prefix_ids == [llama.bos_token_id]


def test_codec_is_cached_per_tokenizer(toks: dict[str, Any]) -> None:
    assert fragment_codec(toks["qwen"]) is fragment_codec(toks["qwen"])
    assert fragment_codec(toks["qwen"]) is not fragment_codec(toks["qwen3"])
    raw = FragmentCodec(backend_of(toks["qwen"]))  # a raw tokenizers.Tokenizer works, and encodes like the HF one
    text = "hello <|im_end|> world\n"
    assert raw.encode_content(text) == fragment_codec(toks["qwen"]).encode_content(text) != []


def test_slow_or_foreign_tokenizers_are_refused() -> None:
    with pytest.raises(TypeError, match="fast"):
        fragment_codec(object())
