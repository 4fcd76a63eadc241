"""Draw the token-masks guide's picture: a real echo episode, tokenized by a real chat-template tokenizer, one box
per token coloured by its role (``docs/assets/token-masks.svg``).

The episode is played on a live echo server (in process, on loopback) through ``EnvClient``; the tokenizer is the
offline-built ``qwen`` family (byte-level BPE + ChatML); the ids and roles are ``tokenize_trajectory``'s. The
output is deterministic: ``tests/docs/test_token_mask_figure.py`` redraws it and compares.

    python scripts/docs/token_mask_figure.py [--out docs/assets/token-masks.svg]
"""

from __future__ import annotations

import argparse
from html import escape
from pathlib import Path

from openenv_echo import EnvClient, Role
from openenv_echo.envs import load_env
from openenv_echo.server import BackgroundServer, create_app
from openenv_echo.tokenization import build_tokenizer, tokenize_trajectory

OUT = Path(__file__).resolve().parents[2] / "docs" / "assets" / "token-masks.svg"
# the fill and text colours of each role (the CLI's colours, as a light page shows them)
COLOURS = {
    Role.CONTEXT: ("#e8e8e8", "#555555"),
    Role.ACTION: ("#cfe8fb", "#0b4f7c"),
    Role.ENV_OUTPUT: ("#d4f2d2", "#1e5e1b"),
    Role.WARNING: ("#fbecc2", "#7a5600"),
}
WIDTH, ROW_H, CHAR_W, PAD, FONT = 640, 26, 7.8, 3, 13  # 640: the page column, shown 1:1


def episode_tokens() -> list[tuple[str, Role]]:
    """(token text, role) for each token of a short echo episode, as ``tokenize_trajectory`` gives them."""
    tok = build_tokenizer("qwen")
    with BackgroundServer(create_app(load_env("echo"))) as url, EnvClient(url) as env:
        env.reset(seed=0, messages=[{"role": "system", "content": "Be brief."}])
        for message in ("hello", "bye"):
            env.step({"message": message}, action_text=message)
        traj = env.trajectory
    assert traj is not None
    tokenized = tokenize_trajectory(traj, tok)
    return [
        (tok.decode([int(i)]), Role.from_code(int(r)))
        for i, r in zip(tokenized.input_ids, tokenized.role_ids, strict=True)
    ]


def svg(tokens: list[tuple[str, Role]]) -> str:
    """Token boxes wrapped into rows (a new row after each newline token), then a legend."""
    shapes: list[str] = []
    x, y = 0.0, 0.0
    for text, role in tokens:
        shown = text.replace("\n", "↵").replace(" ", "·")
        w = max(len(shown), 1) * CHAR_W + 2 * PAD
        if x + w > WIDTH:
            x, y = 0.0, y + ROW_H
        fill, ink = COLOURS[role]
        shapes.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{ROW_H - 4}" rx="3" fill="{fill}" '
            f'stroke="{ink}" stroke-opacity="0.35"><title>{role.value}: {escape(repr(text), quote=False)}</title></rect>'
            f'<text x="{x + PAD:.1f}" y="{y + ROW_H - 10:.1f}" fill="{ink}">{escape(shown, quote=False)}</text>'
        )
        x += w + 2
        if text.endswith("\n"):
            x, y = 0.0, y + ROW_H
    y += ROW_H + 12
    x = 0.0
    for role, (fill, ink) in COLOURS.items():
        w = len(role.value) * CHAR_W + 2 * PAD
        shapes.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{ROW_H - 4}" rx="3" fill="{fill}" '
            f'stroke="{ink}" stroke-opacity="0.35"/><text x="{x + PAD:.1f}" y="{y + ROW_H - 10:.1f}" '
            f'fill="{ink}">{role.value}</text>'
        )
        x += w + 14
    height = y + ROW_H
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:.0f}" '
        f'width="{WIDTH}" height="{height:.0f}" font-family="monospace" font-size="{FONT}">\n'
        "<title>A tokenized echo episode, one box per token, coloured by role</title>\n"
        + "\n".join(shapes)
        + "\n</svg>\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(svg(episode_tokens()), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
