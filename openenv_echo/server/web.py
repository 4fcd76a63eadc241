"""OpenEnv's web interface (``ENABLE_WEB_INTERFACE=true``): play the env in a browser, every segment coloured by role.

Routes as OpenEnv's: ``/`` and ``/web`` redirect to ``/web/``; ``GET /web/metadata``; ``POST /web/reset`` (body: reset
options); ``POST /web/step`` (body ``{"action": {...}}``); ``GET /web/state``. Like OpenEnv's, the page drives one
shared env instance of its own, separate from the ``/ws`` sessions. The page is one self-contained HTML document
(no external assets), so it works offline.
"""

from __future__ import annotations

import asyncio
import html
import json
from collections.abc import Callable
from typing import Any

from fastapi import Body, FastAPI
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from ..roles import ROLES
from .environment import Environment
from .protocol import EnvDriver, ProtocolError

ROLE_COLOURS = {"context": "#3b6ea5", "action": "#2e8540", "env_output": "#b35900", "warning": "#8a8a8a"}
ENABLE_VALUES = ("true", "1", "yes")


def add_web_routes(
    app: FastAPI, driver: EnvDriver, error_response: Callable[[ProtocolError], Response], example_action: dict[str, Any]
) -> None:
    shared: list[Any] = []  # the page's one env instance, made on first use (a worker process for BLOCKING envs)
    lock = asyncio.Lock()

    async def env() -> Any:
        if not shared:
            shared.append(await driver.new_env())
        return shared[0]

    page = _page(driver.env_cls, example_action)

    @app.get("/", include_in_schema=False)
    @app.get("/web", include_in_schema=False)
    async def to_web() -> RedirectResponse:
        return RedirectResponse("/web/", status_code=307)

    @app.get("/web/", include_in_schema=False)
    async def web_page() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/web/metadata", tags=["web"])
    async def web_metadata() -> dict[str, Any]:
        return {**driver.env_cls.get_metadata().model_dump(), "tools": [t.model_dump() for t in driver.tool_specs]}

    @app.post("/web/reset", tags=["web"])
    async def web_reset(options: dict[str, Any] | None = Body(default=None)) -> Any:
        async with lock:
            try:
                obs, tokens = await driver.reset(await env(), options or {})
            except ProtocolError as e:
                return error_response(e)
            return Response(driver.envelope_json(obs, tokens, http=True), media_type="application/json")

    @app.post("/web/step", tags=["web"])
    async def web_step(body: dict[str, Any] = Body(...)) -> Any:
        async with lock:
            try:
                obs = await driver.step(await env(), body.get("action"))
            except ProtocolError as e:
                return error_response(e)
            return Response(driver.envelope_json(obs, False, http=True), media_type="application/json")

    @app.get("/web/state", tags=["web"])
    async def web_state() -> JSONResponse:
        async with lock:
            return JSONResponse(await driver.state(await env()))


def _page(env_cls: type[Environment[Any, Any]], example_action: dict[str, Any]) -> str:
    meta = env_cls.get_metadata()
    css = "\n".join(
        f".role-{r} {{ color: {c}; }} .count-{r} {{ border-left: 6px solid {c}; }}" for r, c in ROLE_COLOURS.items()
    )
    legend = "".join(f'<span class="seg role-{r.value}">{r.value}</span> ' for r in ROLES)
    rows = "".join(
        f'<tr class="count-{r.value}"><td>{r.value}</td><td data-role="{r.value}" class="segments">0</td>'
        f'<td data-role="{r.value}" class="chars">0</td></tr>'
        for r in ROLES
    )
    return _TEMPLATE.format(
        title=html.escape(meta.name),
        description=html.escape(meta.description),
        css=css,
        legend=legend,
        rows=rows,
        example=html.escape(json.dumps(example_action)),
    )


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} · openenv-echo</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; max-width: 70em; }}
#transcript {{ font-family: monospace; white-space: pre-wrap; border: 1px solid #ccc; padding: .8em;
  min-height: 12em; background: #fcfcfc; }}
.seg {{ border-bottom: 1px dotted currentColor; }}
table {{ border-collapse: collapse; }} td, th {{ padding: .2em .8em; text-align: left; }}
textarea {{ width: 100%; font-family: monospace; }}
{css}
</style></head><body>
<h1>{title}</h1><p>{description}</p>
<p>Roles: {legend}</p>
<div>seed <input id="seed" type="number" min="0" value="0">
<button id="reset">Reset</button> <span id="status"></span></div>
<div id="transcript"></div>
<p><textarea id="action" rows="3">{example}</textarea><br><button id="step">Step</button></p>
<table><tr><th>role</th><th>segments</th><th>characters</th></tr>{rows}</table>
<pre id="error" style="color:#b00020"></pre>
<script>
const counts = {{}};
function show(reply) {{
  const t = document.getElementById("transcript");
  for (const s of reply.observation.segments || []) {{
    const span = document.createElement("span");
    span.className = "seg role-" + s.role; span.dataset.role = s.role; span.textContent = s.text;
    t.appendChild(span);
    const c = counts[s.role] || (counts[s.role] = {{segments: 0, chars: 0}});
    c.segments += 1; c.chars += [...s.text].length;
  }}
  for (const [role, c] of Object.entries(counts)) {{
    document.querySelector('td.segments[data-role="' + role + '"]').textContent = c.segments;
    document.querySelector('td.chars[data-role="' + role + '"]').textContent = c.chars;
  }}
  document.getElementById("status").textContent = "reward " + reply.reward + (reply.done ? " · done" : "");
}}
function addAction(text) {{
  const span = document.createElement("span");
  span.className = "seg role-action"; span.dataset.role = "action"; span.textContent = text + "\\n";
  document.getElementById("transcript").appendChild(span);
  const c = counts.action || (counts.action = {{segments: 0, chars: 0}});
  c.segments += 1; c.chars += [...span.textContent].length;
}}
async function post(path, body) {{
  document.getElementById("error").textContent = "";
  const r = await fetch(path, {{method: "POST", headers: {{"content-type": "application/json"}},
                                body: JSON.stringify(body)}});
  const data = await r.json();
  if (!r.ok) {{ document.getElementById("error").textContent = data.code + ": " + data.message; return null; }}
  return data;
}}
document.getElementById("reset").onclick = async () => {{
  const reply = await post("/web/reset", {{seed: Number(document.getElementById("seed").value)}});
  if (!reply) return;
  document.getElementById("transcript").textContent = "";
  for (const k of Object.keys(counts)) delete counts[k];
  document.querySelectorAll("td.segments, td.chars").forEach(td => td.textContent = "0");
  show(reply);
}};
document.getElementById("step").onclick = async () => {{
  let action;
  try {{ action = JSON.parse(document.getElementById("action").value); }}
  catch (e) {{ document.getElementById("error").textContent = "action is not JSON: " + e; return; }}
  const reply = await post("/web/step", {{action}});
  if (!reply) return;
  addAction(Object.values(action).filter(v => typeof v === "string").join(" "));
  show(reply);
}};
</script></body></html>
"""
