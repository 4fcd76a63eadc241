"""Trajectories to token ids with aligned per-token role masks, for real HF tokenizers and chat templates.

* ``TitoBuilder`` / ``tokenize_trajectory`` – token-in-token-out assembly (live rollouts, recorded ids);
* ``StepwiseBuilder`` / ``tokenize_stepwise`` – one sequence per assistant turn, for templates that rewrite
  history (``template_mode`` says which mode a template needs; ``tokenize_sequences(mode="auto")`` picks it);
* ``tokenize_offline`` – whole-conversation render, each token with its characters' role (no sampler ids);
* ``TokenizedTrajectory`` / ``collate`` – the per-sequence result and torch batches (target-aligned masks);
* ``build_tokenizer`` / ``load_tokenizer`` – real tokenizers built offline, or loaded with ``from_pretrained``;
* ``write_jsonl`` / ``write_parquet`` / ``show`` – export and look.

Normative spec: ``rfcs/0003-token-masks.md``. Importing this package needs numpy and rich only; transformers,
tokenizers, torch and pyarrow are imported when used.
"""

from ..roles import OBSERVATION_ROLES
from .compare import AssemblyComparison, Difference, compare_assemblies
from .export import read_jsonl, read_parquet, read_tokenized, write_jsonl, write_parquet
from .fragment_encoding import FragmentCodec, fragment_codec
from .local_tokenizers import FAMILIES, build_tokenizer, load_tokenizer
from .modes import tokenize_sequences
from .observation_tokens import segment_tokens
from .offline import STRADDLE_ROLE, conversation_from_trajectory, tokenize_offline
from .rendered import TaggedMessage
from .show import show
from .stepwise import StepwiseBuilder, tokenize_stepwise
from .template import Scaffold, TemplateError, TemplateMode, TemplateNotPrefixStable, probe_template, template_mode
from .tito import TitoBuilder, tokenize_trajectory
from .tokenized import MASK_KEYS, TokenizedTrajectory, collate

__all__ = [
    "FAMILIES",
    "MASK_KEYS",
    "OBSERVATION_ROLES",
    "STRADDLE_ROLE",
    "AssemblyComparison",
    "Difference",
    "FragmentCodec",
    "Scaffold",
    "StepwiseBuilder",
    "TaggedMessage",
    "TemplateError",
    "TemplateMode",
    "TemplateNotPrefixStable",
    "TitoBuilder",
    "TokenizedTrajectory",
    "build_tokenizer",
    "collate",
    "compare_assemblies",
    "conversation_from_trajectory",
    "fragment_codec",
    "load_tokenizer",
    "probe_template",
    "read_jsonl",
    "read_parquet",
    "read_tokenized",
    "segment_tokens",
    "show",
    "template_mode",
    "tokenize_offline",
    "tokenize_sequences",
    "tokenize_stepwise",
    "tokenize_trajectory",
    "write_jsonl",
    "write_parquet",
]
