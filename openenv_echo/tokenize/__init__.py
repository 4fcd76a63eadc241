"""Trajectories to token ids with aligned per-token role masks, for real HF tokenizers and chat templates.

* ``TitoBuilder`` / ``tokenize_trajectory`` – token-in-token-out assembly (live rollouts, recorded ids);
* ``tokenize_offline`` – whole-conversation render with character offsets (no sampler ids);
* ``TokenizedTrajectory`` / ``collate`` – the per-sequence result and torch batches (target-aligned masks);
* ``build_tokenizer`` / ``load_tokenizer`` – real tokenizers built offline, or loaded with ``from_pretrained``;
* ``write_jsonl`` / ``write_parquet`` / ``show`` – export and look.

Normative spec: ``rfcs/0003-token-masks.md``. Importing this package needs numpy and rich only; transformers,
tokenizers, torch and pyarrow are imported when used.
"""

from ..roles import OBSERVATION_ROLES
from .compare import AssemblyComparison, Difference, compare_assemblies
from .export import read_jsonl, read_parquet, read_tokenized, write_jsonl, write_parquet
from .fragment import FragmentCodec, fragment_codec
from .local import FAMILIES, build_tokenizer, load_tokenizer
from .offline import STRADDLE_ROLE, TaggedMessage, conversation_from_trajectory, tokenize_offline
from .show import show
from .template import Scaffold, TemplateError, TemplateNotPrefixStable, probe_template
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
    "TaggedMessage",
    "TemplateError",
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
    "show",
    "tokenize_offline",
    "tokenize_trajectory",
    "write_jsonl",
    "write_parquet",
]
