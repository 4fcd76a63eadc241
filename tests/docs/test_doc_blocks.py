"""Every python and shell block of README.md, rfcs/*.md and the site's pages (docs/**/*.md) runs as written (see
``doc_blocks`` for the directives)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from openenv_echo.server import free_port

from .doc_blocks import Block, blocks, commands, parse_directives

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "rfcs").glob("*.md")), *sorted((ROOT / "docs").rglob("*.md"))]
ALL = [b for doc in DOCS for b in blocks(doc)]


def _param(block: Block) -> object:
    marks: list[pytest.MarkDecorator] = []
    d = block.directives
    if "skip" in d:
        marks.append(pytest.mark.skip(reason=f"{block.id}: {d['skip']}"))
    if "docker" in d:
        marks.append(pytest.mark.docker)
    if "slow" in d:
        marks.append(pytest.mark.trainer)
    if "timeout" in d:
        marks.append(pytest.mark.timeout(int(d["timeout"]) + 60))
    return pytest.param(block, id=f"{block.id}-{block.lang}", marks=marks)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    env.pop("NO_COLOR", None)
    return env


def _report(block: Block, code: str, proc: subprocess.CompletedProcess) -> str:
    return (
        f"{block.id} ({block.lang}) failed with exit {proc.returncode}\n--- block as run ---\n{code}"
        f"--- stdout (tail) ---\n{proc.stdout[-4000:]}\n--- stderr (tail) ---\n{proc.stderr[-4000:]}"
    )


def _scratch_repo(tmp: Path) -> Path:
    """A directory that looks like a checkout: links to the repo's files, ``.venv`` -> the running environment."""
    repo = tmp / "repo"
    repo.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv", "out", ".cache"):
            (repo / entry.name).symlink_to(entry)
    (repo / ".venv").symlink_to(Path(sys.prefix))
    return repo


_WAIT = """doc_wait() {  # doc_wait PORT: until http://127.0.0.1:PORT/health answers (60 s)
  "$DOC_PY" -c 'import sys, time, httpx
deadline = time.monotonic() + 60
while True:
    try:
        if httpx.get(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1).status_code == 200:
            break
    except httpx.HTTPError:
        pass
    if time.monotonic() > deadline:
        sys.exit(f"nothing answered on port {sys.argv[1]} within 60 s")
    time.sleep(0.2)' "$1"
}
"""


def _shell_script(block: Block, port: int | None, logs: Path) -> str:
    background = {int(i) for i in block.directives.get("background", "").split(",") if i}
    if background and port is None:
        raise ValueError(f"{block.id}: background= needs port= to know when the server is up")
    lines = ["set -euo pipefail", _WAIT]
    for n, cmd in enumerate(commands(block.prepared(port)), start=1):
        if os.geteuid() == 0 and cmd.startswith("sudo "):
            cmd = cmd[len("sudo ") :]
        if n in background:
            lines += [f"( {cmd}\n) > {logs}/background-{n}.log 2>&1 &", f"doc_wait {port}"]  # cmd may end in a comment
        else:
            lines.append(cmd)
    return "\n".join(lines) + "\n"


def _process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (Linux ``/proc``), read before anything is killed."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo.extend(children.get(tree[-1], []))
    return tree


def _run_shell(block: Block, tmp: Path) -> None:
    port = free_port() if "port" in block.directives else None
    cwd = ROOT if "docker" in block.directives else _scratch_repo(tmp)
    script = _shell_script(block, port, tmp)
    env = _env() | {"DOC_PY": sys.executable}
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # background servers share the group: one killpg stops them all
    )
    timeout = float(block.directives.get("timeout", 300))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in _process_tree(proc.pid):  # also servers that started their own session (LocalProcessProvider)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out, err = proc.communicate()
        err += f"\n[doc-test] timed out after {timeout:g} s (timeout= in the block's doc-test comment)"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # background servers
        except ProcessLookupError:
            pass
        proc.wait()
    logs = "".join(f"\n--- {p.name} ---\n{p.read_text()[-2000:]}" for p in sorted(tmp.glob("background-*.log")))
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err + logs)
    assert proc.returncode == 0, _report(block, script, result)


def _run_python(block: Block, tmp: Path, running_server: Callable[..., str]) -> None:
    port = None
    if "server" in block.directives:
        port = int(running_server(block.directives["server"]).rsplit(":", 1)[1])
    elif "port" in block.directives:
        port = free_port()
    code = block.prepared(port)
    (tmp / "block.py").write_text(code, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "block.py"],
        cwd=tmp,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=float(block.directives.get("timeout", 300)),
    )
    assert proc.returncode == 0, _report(block, code, proc)


@pytest.mark.parametrize("block", [_param(b) for b in ALL])
def test_doc_block_runs(block: Block, tmp_path: Path, running_server: Callable[..., str]) -> None:
    if block.lang == "python":
        _run_python(block, tmp_path, running_server)
    else:
        _run_shell(block, tmp_path)


def test_blocks_are_found_and_every_exemption_has_a_reason() -> None:
    assert len([b for b in ALL if b.path == ROOT / "README.md"]) >= 2
    assert len([b for b in ALL if ROOT / "docs" in b.path.parents]) >= 12  # the guides' blocks, moved from the README
    for b in ALL:
        assert b.directives.get("skip", "x").strip(), f"{b.id}: skip= needs a reason"


def test_directives_are_parsed_strictly(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        'text\n<!-- doc-test: port=8000 background=1 sub="a b=>c" -->\n```bash\nserve --port 8000 \\\n  --x\n'
        "# comment\n\nnext a b\n```\n\n```json\n{}\n```\n```python\nprint(1)\n```\n"
    )
    first, second = blocks(doc)
    assert first.line == 3 and first.directives == {"port": "8000", "background": "1", "sub": "a b=>c"}
    assert commands(first.prepared(1234)) == ["serve --port 1234 --x", "next c"]
    assert second.lang == "python" and second.directives == {}
    with pytest.raises(ValueError, match="unknown doc-test key 'prot'"):
        parse_directives("prot=8000", "x")
    doc.write_text('<!-- doc-test: sub="zzz=>y" -->\n```sh\necho hi\n```\n')
    with pytest.raises(ValueError, match="does not match"):
        blocks(doc)[0].prepared()
