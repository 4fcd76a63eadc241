"""Real tokenizers built offline, plus the ordinary ``from_pretrained`` path for hub or saved tokenizers.

There is no model hub here, so tests, the demo and the benchmarks train small but real tokenizers with the
``tokenizers`` library and attach real Jinja chat templates. Three families cover the shapes that matter for
role masks:

* ``qwen``  – byte-level BPE with a Qwen2-style split regex, ChatML specials (``<|im_start|>``, ``<|im_end|>``,
  ``<|endoftext|>``), no BOS, eos ``<|im_end|>``, pad ``<|endoftext|>``, ``CHATML_TEMPLATE``.
* ``llama`` – SentencePiece-style BPE (``Metaspace`` pre-tokenizer, ``▁`` word marker, byte fallback) with
  ``<s>`` prepended by a post-processor (BOS), eos ``<|eot_id|>``, no pad token, ``LLAMA3_TEMPLATE``.
* ``qwen3`` – the ``qwen`` vocabulary with ``QWEN3_TEMPLATE``, which is not prefix-stable (failure path).

A built tokenizer is saved with ``save_pretrained`` under a cache directory keyed by every build parameter and
the corpus hash, so it is trained once per machine (well under 2 s) and later loaded in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .chat_templates import CHATML_TEMPLATE, LLAMA3_TEMPLATE, QWEN3_TEMPLATE

if TYPE_CHECKING:  # transformers is imported lazily: openenv_echo must import without it
    from transformers import PreTrainedTokenizerFast

BUILDER_VERSION = "2"
DEFAULT_VOCAB_SIZE = 4096
LOCAL_PREFIX = "local:"

# Qwen2/cl100k-style split: contractions, letters with one leading non-letter, single digits, punctuation
# runs with trailing newlines, newline runs, other whitespace.
_BYTELEVEL_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class FamilySpec:
    """How to build one tokenizer family."""

    model: str  # "bytelevel" or "metaspace"
    chat_template: str
    special_tokens: tuple[str, ...]
    added_tokens: tuple[str, ...]
    bos: str | None
    eos: str
    pad: str | None
    unk: str | None
    description: str


_CHATML_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_QWEN_ADDED = ("<tool_response>", "</tool_response>", "<think>", "</think>")

FAMILIES: dict[str, FamilySpec] = {
    "qwen": FamilySpec(
        "bytelevel",
        CHATML_TEMPLATE,
        _CHATML_SPECIALS,
        _QWEN_ADDED,
        None,
        "<|im_end|>",
        "<|endoftext|>",
        None,
        "byte-level BPE, ChatML (Qwen2.5-style) template",
    ),
    "llama": FamilySpec(
        "metaspace",
        LLAMA3_TEMPLATE,
        ("<unk>", "<s>", "</s>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        (),
        "<s>",
        "<|eot_id|>",
        None,
        "<unk>",
        "SentencePiece-style BPE (Metaspace, byte fallback), <s> BOS post-processor, Llama-3 header template",
    ),
    "qwen3": FamilySpec(
        "bytelevel",
        QWEN3_TEMPLATE,
        _CHATML_SPECIALS,
        _QWEN_ADDED,
        None,
        "<|im_end|>",
        "<|endoftext|>",
        None,
        "byte-level BPE, Qwen3-style template that drops past <think> blocks (not prefix-stable)",
    ),
}

_LOCK = threading.Lock()
_MEMO: dict[tuple[str, int, str, str], Any] = {}


def default_cache_dir() -> Path:
    """``$OPENENV_ECHO_CACHE/tokenizers`` or ``~/.cache/openenv-echo/tokenizers``."""
    root = os.environ.get("OPENENV_ECHO_CACHE") or Path.home() / ".cache" / "openenv-echo"
    return Path(root) / "tokenizers"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build_tokenizer(
    family: str,
    corpus: list[str] | None = None,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    cache_dir: str | os.PathLike[str] | None = None,
) -> PreTrainedTokenizerFast:
    """A real HF fast tokenizer of ``family`` (see ``FAMILIES``) with its chat template, cached on disk.

    ``corpus`` defaults to ``synthetic_corpus()``. The cache key covers the family spec, vocab size, corpus
    hash and builder version; a cached build is loaded with ``from_pretrained``. The returned object's
    ``name_or_path`` is ``"local:<family>"`` (accepted by ``load_tokenizer``) unless built with a custom corpus
    or vocab size, in which case it is the cache directory.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown tokenizer family {family!r}; known: {sorted(FAMILIES)}")
    if not isinstance(vocab_size, int) or vocab_size < 600:
        raise ValueError(f"vocab_size must be an int >= 600 (byte alphabet + specials), got {vocab_size!r}")
    spec = FAMILIES[family]
    default_corpus = corpus is None
    if corpus is None:
        from .corpus import default_corpus_key

        corpus_sha = "default-" + default_corpus_key()
    else:
        if not corpus or not any(corpus):
            raise ValueError("corpus must contain some text")
        corpus_sha = _sha("\x00".join(corpus))
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    memo_key = (family, vocab_size, corpus_sha, str(root))
    with _LOCK:
        if memo_key in _MEMO:
            return _MEMO[memo_key]  # type: ignore[no-any-return]
        key = _sha(json.dumps([BUILDER_VERSION, spec.__dict__, vocab_size, corpus_sha], sort_keys=True))[:16]
        target = root / f"{family}-{vocab_size}-{key}"
        if not (target / "tokenizer.json").is_file():
            if corpus is None:
                from .corpus import synthetic_corpus

                corpus = synthetic_corpus()
            _train_and_save(spec, corpus, vocab_size, target)
        tok = _load_saved(target)
        if default_corpus and vocab_size == DEFAULT_VOCAB_SIZE:
            tok.name_or_path = f"{LOCAL_PREFIX}{family}"
        _MEMO[memo_key] = tok
        return tok


def _train_and_save(spec: FamilySpec, corpus: list[str], vocab_size: int, target: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    backend = (
        _train_bytelevel(spec, corpus, vocab_size)
        if spec.model == "bytelevel"
        else _train_metaspace(spec, corpus, vocab_size)
    )
    if spec.added_tokens:
        from tokenizers import AddedToken

        backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec.added_tokens])
    assert isinstance(backend, Tokenizer)
    named = {spec.bos, spec.eos, spec.pad, spec.unk}
    hf = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        bos_token=spec.bos,
        eos_token=spec.eos,
        pad_token=spec.pad,
        unk_token=spec.unk,
        extra_special_tokens=[t for t in spec.special_tokens if t not in named],
    )
    hf.chat_template = spec.chat_template
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        hf.save_pretrained(tmp)
        try:
            os.replace(tmp, target)  # atomic; a concurrent builder may have won the race
        except OSError:
            if not (target / "tokenizer.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _train_bytelevel(spec: FamilySpec, corpus: list[str], vocab_size: int) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_BYTELEVEL_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(spec.added_tokens),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(spec.special_tokens),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def _train_metaspace(spec: FamilySpec, corpus: list[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=spec.unk))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 256 - len(spec.added_tokens),
        min_frequency=2,
        special_tokens=list(spec.special_tokens),
        limit_alphabet=400,
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    # SentencePiece-style byte fallback: <0x00>..<0xFF> vocab entries for characters outside the vocab.
    data = json.loads(tok.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    next_id = max(vocab.values()) + 1
    for b in range(256):
        piece = f"<0x{b:02X}>"
        if piece not in vocab:
            vocab[piece] = next_id
            next_id += 1
    data["model"]["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(data))
    tok.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    assert spec.bos is not None
    bos_id = tok.token_to_id(spec.bos)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{spec.bos} $A", pair=f"{spec.bos} $A {spec.bos} $B", special_tokens=[(spec.bos, bos_id)]
    )
    return tok


def _load_saved(path: Path) -> PreTrainedTokenizerFast:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(path))  # type: ignore[no-any-return]


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def load_tokenizer(name_or_path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """Load a tokenizer: ``"local:<family>"`` builds one with ``build_tokenizer``; anything else goes through
    ``AutoTokenizer.from_pretrained`` (a local directory, or a hub name when the hub is reachable).

    With ``HF_HUB_OFFLINE`` set, only local files are used (``local_files_only=True``) and a name that is not
    a local directory fails with a message saying so instead of a network error.
    """
    name = str(name_or_path)
    if name.startswith(LOCAL_PREFIX):
        family = name[len(LOCAL_PREFIX) :]
        return build_tokenizer(family)
    from transformers import AutoTokenizer

    offline = _offline()
    if offline:
        kwargs.setdefault("local_files_only", True)
    try:
        return AutoTokenizer.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as e:
        where = "a local directory" if Path(name).exists() else "not a local path"
        hint = " HF_HUB_OFFLINE is set, so only local files and the local hub cache are used." if offline else ""
        raise OSError(f"cannot load tokenizer {name!r} ({where}).{hint} Cause: {e}") from e
