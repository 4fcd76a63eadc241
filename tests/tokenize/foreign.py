"""Tokenizers unlike the shipped local families, built in the test suite (issue #15 acceptance).

* ``unigram`` – SentencePiece-style **Unigram** model (Metaspace ``▁``, dummy prefix on the first piece), a BOS
  post-processor, Gemma-style turn specials (``<start_of_turn>``/``<end_of_turn>``, assistant role ``model``),
  and control pieces that live *inside the Unigram vocabulary* (so plain text could spell them);
* ``bytebpe`` – **byte-level BPE** with the GPT-2 split regex, Phi-3-style specials (``<|system|>``, ``<|user|>``,
  ``<|assistant|>``, ``<|tool|>``, ``<|end|>``) and two *non-special* added tokens (``[OUT]``, ``[/OUT]``) that
  the template writes around tool output.

Each has its own Jinja chat template (written here). Vocabularies are small so training takes about a second.
"""

from __future__ import annotations

from typing import Any

UNIGRAM_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
UNIGRAM_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- set role = 'model' if message.role == 'assistant' else message.role %}"
    "{{- '<start_of_turn>' + role + '\\n' + message.content + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)

BYTEBPE_SPECIALS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>"]
BYTEBPE_ADDED = ["[OUT]", "[/OUT]"]
BYTEBPE_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{{- '<|tool|>\\n[OUT]' + message.content + '[/OUT]<|end|>\\n' }}"
    "{%- else %}"
    "{{- '<|' + message.role + '|>\\n' + message.content + '<|end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"
)

FOREIGN = ("unigram", "bytebpe")


def _corpus() -> list[str]:
    from openenv_echo.tokenization.corpus import synthetic_corpus

    docs = list(synthetic_corpus(n_docs=600, include_stdlib=False))
    # chat markup in the training text: BPE may learn to spell the specials, Unigram keeps them as pieces
    docs += ["<start_of_turn>user\nhi<end_of_turn>\n<|user|>\nhi<|end|>\n[OUT]ok[/OUT]"] * 50
    return docs


def build_foreign(kind: str) -> Any:
    """A real HF fast tokenizer (``PreTrainedTokenizerFast``) of ``kind`` with its chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
        trainer = trainers.UnigramTrainer(
            vocab_size=1200, special_tokens=UNIGRAM_SPECIALS, unk_token="<unk>", show_progress=False
        )
        tok.train_from_iterator(_corpus(), trainer=trainer)
        bos = tok.token_to_id("<bos>")
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", bos)]
        )
        hf = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<bos>",
            eos_token="<end_of_turn>",
            pad_token="<pad>",
            unk_token="<unk>",
            extra_special_tokens=["<eos>", "<start_of_turn>"],
        )
        hf.chat_template = UNIGRAM_TEMPLATE
    elif kind == "bytebpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=1500,
            min_frequency=2,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=BYTEBPE_SPECIALS,
            show_progress=False,
        )
        tok.train_from_iterator(_corpus(), trainer=trainer)
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in BYTEBPE_ADDED])
        hf = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            eos_token="<|end|>",
            pad_token="<|endoftext|>",
            extra_special_tokens=[t for t in BYTEBPE_SPECIALS if t not in ("<|end|>", "<|endoftext|>")],
        )
        hf.chat_template = BYTEBPE_TEMPLATE
    else:
        raise ValueError(kind)
    hf.name_or_path = f"test:{kind}"
    return hf
