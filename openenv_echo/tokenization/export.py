"""Export tokenized trajectories to JSONL and Parquet (readable by HF ``datasets``), and read them back.

One row per sequence. Columns: ``input_ids`` (int64 list), ``role_ids`` (int8 list, ``Role.code``), the four
target masks ``context_mask``/``action_mask``/``env_output_mask``/``warning_mask`` (bool lists, mask[t]
refers to token t as a target, False at t=0), ``length``, ``obs_count`` (|O| before truncation),
``num_truncated``, ``method``, ``tokenizer_name``, ``tokenizer_fingerprint``, ``episode_id``, ``reward``,
``stats`` (a JSON string), ``sampler_logprobs`` (float list, null where a token was not sampled; null column
value when no logprobs were recorded), ``sampling_temperature`` and ``turn`` (step-wise sequences). The masks are derived from ``role_ids`` and written for convenience; readers
rebuild them from ``role_ids``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..roles import Role
from ..wire import TokenizerIdentity
from .tokenized import MASK_KEYS, TokenizedTrajectory, logprobs_list

FORMAT_VERSION = "1"


def to_row(tt: TokenizedTrajectory) -> dict[str, Any]:
    """A flat, JSON- and Arrow-ready row for one sequence."""
    masks = tt.masks()
    return {
        "format": FORMAT_VERSION,
        "input_ids": tt.input_ids.tolist(),
        "role_ids": tt.role_ids.tolist(),
        **{MASK_KEYS[r]: masks[MASK_KEYS[r]].tolist() for r in Role},
        "length": len(tt),
        "obs_count": int(tt.obs_count),
        "num_truncated": int(tt.num_truncated),
        "method": tt.method,
        "tokenizer_name": None if tt.tokenizer is None else tt.tokenizer.name,
        "tokenizer_fingerprint": None if tt.tokenizer is None else tt.tokenizer.fingerprint,
        "episode_id": tt.episode_id,
        "reward": tt.reward,
        "stats": json.dumps(tt.stats, sort_keys=True),
        "sampler_logprobs": logprobs_list(tt.sampler_logprobs),
        "sampling_temperature": tt.sampling_temperature,
        "turn": tt.turn,
    }


def from_row(row: dict[str, Any]) -> TokenizedTrajectory:
    """Inverse of ``to_row`` (masks are ignored: they are rebuilt from ``role_ids``)."""
    if "input_ids" not in row or "role_ids" not in row:
        raise ValueError(f"not a tokenized-trajectory row (keys: {sorted(row)})")
    stats = row.get("stats") or "{}"
    tok = None
    if row.get("tokenizer_fingerprint"):
        tok = TokenizerIdentity(name=row.get("tokenizer_name") or "", fingerprint=row["tokenizer_fingerprint"])
    return TokenizedTrajectory.from_dict(
        {
            "input_ids": list(row["input_ids"]),
            "role_ids": list(row["role_ids"]),
            "obs_count": row.get("obs_count", 0),
            "num_truncated": row.get("num_truncated", 0),
            "method": row.get("method", "tito"),
            "tokenizer": None if tok is None else tok.model_dump(),
            "episode_id": row.get("episode_id"),
            "reward": row.get("reward"),
            "stats": json.loads(stats) if isinstance(stats, str) else stats,
            "sampler_logprobs": row.get("sampler_logprobs"),
            "sampling_temperature": row.get("sampling_temperature"),
            "turn": row.get("turn"),
        }
    )


def write_jsonl(items: Iterable[TokenizedTrajectory], path: str | os.PathLike[str]) -> int:
    """Write one row per line; returns the number of rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for tt in items:
            f.write(json.dumps(to_row(tt), ensure_ascii=False) + "\n")
            n += 1
    return n


def read_jsonl(path: str | os.PathLike[str]) -> list[TokenizedTrajectory]:
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(from_row(json.loads(line)))
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: {e}") from e
    return out


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("format", pa.string()),
            ("input_ids", pa.list_(pa.int64())),
            ("role_ids", pa.list_(pa.int8())),
            *[(MASK_KEYS[r], pa.list_(pa.bool_())) for r in Role],
            ("length", pa.int64()),
            ("obs_count", pa.int64()),
            ("num_truncated", pa.int64()),
            ("method", pa.string()),
            ("tokenizer_name", pa.string()),
            ("tokenizer_fingerprint", pa.string()),
            ("episode_id", pa.string()),
            ("reward", pa.float64()),
            ("stats", pa.string()),
            ("sampler_logprobs", pa.list_(pa.float32())),
            ("sampling_temperature", pa.float64()),
            ("turn", pa.int64()),
        ],
        metadata={
            "openenv_echo.format": FORMAT_VERSION,
            "openenv_echo.role_codes": json.dumps({r.value: r.code for r in Role}),
        },
    )


def write_parquet(items: Iterable[TokenizedTrajectory], path: str | os.PathLike[str]) -> int:
    """Write a Parquet file (``datasets.load_dataset("parquet", data_files=path)`` reads it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [to_row(tt) for tt in items]
    schema = _schema()
    table = pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return len(rows)


def read_parquet(path: str | os.PathLike[str]) -> list[TokenizedTrajectory]:
    import pyarrow.parquet as pq

    return [from_row(r) for r in pq.read_table(path).to_pylist()]


def read_tokenized(path: str | os.PathLike[str]) -> list[TokenizedTrajectory]:
    """Read a ``.parquet`` or JSONL export."""
    return read_parquet(path) if str(path).endswith(".parquet") else read_jsonl(path)
