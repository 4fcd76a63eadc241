"""Import hygiene: the package never pulls torch/transformers in at import time."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from openenv_echo.roles import Role
from openenv_echo.tokenization import fragment_codec
from openenv_echo.tokenization.observation_tokens import segment_tokens
from openenv_echo.wire import env_output, warning


def test_importing_does_not_import_torch_or_transformers() -> None:
    code = (
        "import sys, openenv_echo, openenv_echo.tokenization\n"
        "heavy = [m for m in ('torch', 'transformers', 'tokenizers', 'pyarrow') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_server_segment_tokens_match_client_side_body_encoding(toks: dict[str, Any]) -> None:
    tok = toks["llama"]
    segs = [warning("[echo] "), env_output("hello\n"), env_output("<|eot_id|>")]
    server = segment_tokens(tok, segs)
    client = [i for s in segs for i in fragment_codec(tok).encode_content(s.text)]
    assert server.ids == client
    assert server.roles[-1] is Role.ENV_OUTPUT
