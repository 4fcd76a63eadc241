"""Generate the shipped suite of Harbor tasks deterministically from fixed seeds.

``python -m shell_env.server.generate_tasks [--out DIR]`` (default: ``envs/shell_env/tasks``) rewrites every
task directory from its seed: the same seeds give byte-identical files (tests/envs/test_shell_tasks.py checks the
committed suite against a fresh run). Each task is small, runs offline on the project's base image (bash, coreutils,
tar, gzip, python3) and has a reference ``solution/solve.sh``; its ``tests/test.sh`` always writes
``/logs/verifier/reward.txt``: ``1`` for a correct end state, ``0`` otherwise. The expected answers live only in
``tests/`` (uploaded after the agent is done), never in the image.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import shutil
import tarfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from shell_env.server.git_repository import Commit, repository_files
from shell_env.server.tasks import BASE_IMAGE, CONTAINER_REWARD_TXT, SUITE_DIR

WORDS = [
    "amber",
    "basalt",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "krypton",
    "lagoon",
    "meadow",
    "nickel",
    "onyx",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "umber",
    "violet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
]
REPO = "repo"
"""Where a task's git repository lives, under ``/app``."""


@dataclass
class Spec:
    """One generated task: what ``write_task`` turns into a Harbor task directory."""

    instruction: str
    app: Mapping[str, str | bytes]
    """Files copied into the image under ``/app`` (the working directory)."""
    solve: str
    """Body of ``solution/solve.sh`` (runs in ``/app``)."""
    check: str
    """Body of ``tests/check.py``: exits 0 iff the end state is correct."""
    category: str
    near_miss: str
    """Body of ``solution/near_miss.sh`` (runs in ``/app``): a plausible, almost-right end state the check must score
    0 (the container tier runs it in place of the solution; our env never uploads ``solution/``)."""
    repository: tuple[Commit, ...] | None = None
    """A git repository at ``/app/repo`` with this history (oldest first), for tasks that need git, the one package
    the base image lacks (the image build then needs Debian's mirror). A shipped task makes it with git at build
    time (``environment/setup.sh``, run as root, then deleted: a ``.git`` directory cannot be committed here); a
    generated instance carries it as files (``git_repository.repository_files``), unpacked with the rest."""


def _files_sort(r: random.Random) -> Spec:
    exts = r.sample(["txt", "csv", "log", "json", "md"], 3)
    names = {f"{r.choice(WORDS)}-{i}.{r.choice(exts)}": f"{r.choice(WORDS)}\n" for i in range(r.randint(7, 10))}
    expected = {f"sorted/{n.rsplit('.', 1)[1]}/{n}": c for n, c in names.items()}
    return Spec(
        instruction="Move every file in /app/inbox into /app/sorted/<extension>/ (for example inbox/a.txt goes to "
        "sorted/txt/a.txt), keeping file names and contents. /app/inbox must be empty afterwards.",
        app={f"inbox/{n}": c for n, c in names.items()},
        solve='cd /app\nfor f in inbox/*; do ext="${f##*.}"; mkdir -p "sorted/$ext"; mv "$f" "sorted/$ext/"; done\n',
        check=f"EXPECTED = {json.dumps(expected, sort_keys=True)}\n"
        "for rel, text in EXPECTED.items():\n    assert (APP / rel).read_text() == text, rel\n"
        "assert not any((APP / 'inbox').iterdir())\n",
        category="files",
        near_miss='cd /app\nfor f in inbox/*; do ext="${f##*.}"; mkdir -p "sorted/$ext"; cp "$f" "sorted/$ext/"; done\n',
    )


def _word_count(r: random.Random) -> Spec:
    target = r.choice(WORDS)
    lines: list[str] = []
    for _ in range(r.randint(30, 45)):
        words = [r.choice(WORDS[:8] + [target]) for _ in range(r.randint(4, 9))]
        words = [w.capitalize() if r.random() < 0.3 else w for w in words]
        if r.random() < 0.2 or not lines:
            words.append(target + "s")  # a longer word holding the target: not a match
        lines.append(" ".join(words) + r.choice([".", ",", "!", ""]))
    text = "\n".join(lines) + "\n"
    count = sum(w.strip(".,!").lower() == target for w in text.split())
    return Spec(
        instruction=f"Count how many times the word '{target}' occurs in /app/notes.txt as a whole word, ignoring "
        "case (punctuation is not part of a word). Write just the number to /app/answer.txt.",
        app={"notes.txt": text},
        solve=f"grep -oiw '{target}' /app/notes.txt | wc -l > /app/answer.txt\n",
        check=f"assert (APP / 'answer.txt').read_text().strip() == '{count}'\n",
        category="text processing",
        near_miss=f"grep -oi '{target}' /app/notes.txt | wc -l > /app/answer.txt\n",
    )


def _log_errors(r: random.Random) -> Spec:
    codes = sorted({f"E{r.randint(100, 999)}" for _ in range(r.randint(4, 7))})
    lines = []
    for i in range(r.randint(60, 90)):
        level = r.choice(["INFO", "INFO", "WARN", "ERROR"])
        msg = f"code={r.choice(codes)} {r.choice(WORDS)} failed" if level == "ERROR" else f"{r.choice(WORDS)} ok"
        lines.append(f"2026-01-{1 + i % 28:02d}T{i % 24:02d}:00:00 {level} {msg}")
    lines += [f"2026-02-01T00:00:00 ERROR code={c} {r.choice(WORDS)} failed" for c in codes]
    lines.append("2026-02-02T00:00:00 WARN code=E000 retried")  # a WARN code is not an error
    r.shuffle(lines)
    return Spec(
        instruction="/app/app.log is a service log. Write the distinct error codes (the code=EXXX value of ERROR "
        "lines only) to /app/errors.txt, one per line, sorted, without the 'code=' prefix.",
        app={"app.log": "\n".join(lines) + "\n"},
        solve="grep ' ERROR ' /app/app.log | grep -o 'code=E[0-9]*' | cut -d= -f2 | sort -u > /app/errors.txt\n",
        check=f"assert (APP / 'errors.txt').read_text().split() == {codes!r}\n",
        category="text processing",
        near_miss="grep -o 'code=E[0-9]*' /app/app.log | cut -d= -f2 | sort -u > /app/errors.txt\n",
    )


def _csv_totals(r: random.Random) -> Spec:
    regions = r.sample(["north", "south", "east", "west", "central"], 4)
    rows = [(r.choice(regions), r.randint(1, 500)) for _ in range(r.randint(25, 40))]
    totals: Counter[str] = Counter()
    for region, amount in rows:
        totals[region] += amount
    expected = "region,total\n" + "".join(f"{k},{totals[k]}\n" for k in sorted(totals))
    return Spec(
        instruction="/app/sales.csv has a header and rows of region,amount. Write /app/totals.csv with the header "
        "'region,total' and one row per region with the sum of its amounts, sorted by region name.",
        app={"sales.csv": "region,amount\n" + "".join(f"{a},{b}\n" for a, b in rows)},
        solve="{ echo region,total; tail -n +2 /app/sales.csv | "
        "awk -F, '{t[$1]+=$2} END {for (k in t) print k\",\"t[k]}' | sort; } > /app/totals.csv\n",
        check=f"assert (APP / 'totals.csv').read_text() == {expected!r}\n",
        category="data wrangling",
        near_miss="{ echo region,total; "
        "awk -F, '{t[$1]+=$2} END {for (k in t) print k\",\"t[k]}' /app/sales.csv | sort; } > /app/totals.csv\n",
    )


def _json_join(r: random.Random) -> Spec:
    users = [{"id": i, "name": n} for i, n in enumerate(r.sample(WORDS, 5), start=1)]
    idle = r.randint(1, 5)  # one user has no order: the "0 included" clause is tested
    orders = [
        {"order": 100 + k, "user_id": r.choice([i for i in range(1, 6) if i != idle])} for k in range(r.randint(10, 18))
    ]
    counts = {u["name"]: sum(o["user_id"] == u["id"] for o in orders) for u in users}
    return Spec(
        instruction="/app/users.json lists users (id, name) and /app/orders.json lists orders (order, user_id). "
        "Write /app/report.json: a JSON object mapping every user's name to their number of orders (0 included).",
        app={"users.json": json.dumps(users, indent=1) + "\n", "orders.json": json.dumps(orders, indent=1) + "\n"},
        solve="python3 - <<'PY'\nimport json\nusers = json.load(open('/app/users.json'))\n"
        "orders = json.load(open('/app/orders.json'))\n"
        "report = {u['name']: sum(o['user_id'] == u['id'] for o in orders) for u in users}\n"
        "json.dump(report, open('/app/report.json', 'w'))\nPY\n",
        check=f"assert json.loads((APP / 'report.json').read_text()) == {counts!r}\n",
        category="data wrangling",
        near_miss="python3 - <<'PY'\nimport json, collections\nusers = {u['id']: u['name'] for u in json.load(open('/app/users.json'))}\n"
        "counts = collections.Counter(users[o['user_id']] for o in json.load(open('/app/orders.json')))\n"
        "json.dump(dict(counts), open('/app/report.json', 'w'))\nPY\n",
    )


def _fix_bash(r: random.Random) -> Spec:
    step = r.randint(2, 5)
    script = (
        "#!/bin/bash\n# usage: series.sh N -> prints the sum of the multiples of "
        f"{step} from {step} up to and including N\n"
        f"n=$1\ntotal=0\nfor ((i={step}; i<n; i+={step})); do\n  total=$((total + i))\ndone\necho $total\n"
    )
    cases = {n: sum(range(step, n + 1, step)) for n in (step, step * 3, r.randint(20, 60), 100)}
    return Spec(
        instruction=f"/app/series.sh should print the sum of the multiples of {step} from {step} up to and "
        "including N (`bash /app/series.sh N`), but some answers are wrong. Fix the script in place.",
        app={"series.sh": script},
        solve="sed -i 's/i<n;/i<=n;/' /app/series.sh\n",
        check=f"for n, want in {cases!r}.items():\n"
        "    out = as_agent(['bash', str(APP / 'series.sh'), str(n)])\n"
        "    assert out.stdout.strip() == str(want), (n, out.stdout)\n",
        category="script to fix",
        near_miss=f"sed -i 's/i={step}; i<n;/i=0; i<n;/' /app/series.sh\n",
    )


def _fix_python(r: random.Random) -> Spec:
    data = [r.randint(1, 99) for _ in range(r.randint(8, 14))]
    if sum(data) % len(data) == 0:  # a mean with decimals, so integer division is wrong
        data[0] += 1
    program = (
        "import sys\n\n\ndef mean(values):\n    return sum(values) / (len(values) - 1)\n\n\n"
        "values = [float(line) for line in open(sys.argv[1]) if line.strip()]\n"
        "print(f'{mean(values):.2f}')\n"
    )
    probe = [r.randint(1, 50) for _ in range(6)]
    if sum(probe) % len(probe) == 0:
        probe[0] += 1
    return Spec(
        instruction="`python3 /app/stats.py /app/values.txt` should print the mean of the numbers in the file "
        "with two decimals, but the result is wrong. Fix /app/stats.py.",
        app={"stats.py": program, "values.txt": "".join(f"{v}\n" for v in data)},
        solve="sed -i 's|(len(values) - 1)|len(values)|' /app/stats.py\n",
        check=f"probe = {probe!r}\nfor values in ({data!r}, probe):\n"
        "    path = SCRATCH / 'values.txt'\n    path.write_text(''.join(f'{v}\\n' for v in values))\n"
        "    out = as_agent(['python3', str(APP / 'stats.py'), str(path)])\n"
        "    assert out.stdout.strip() == f'{sum(values) / len(values):.2f}', out.stdout\n",
        category="script to fix",
        near_miss="sed -i 's|sum(values) / (len(values) - 1)|sum(values) // len(values)|' /app/stats.py\n",
    )


_SERVER = """\
import configparser
import http.server
import os
import sys

config = configparser.ConfigParser()
config.read(os.path.join(os.path.dirname(__file__), "service.ini"))
section = config["service"]
data_dir = section["data_dir"]
if not os.path.isdir(data_dir):
    sys.exit(f"fatal: data_dir {data_dir} does not exist")
greeting = open(os.path.join(data_dir, "greeting.txt")).read().strip()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = greeting.encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(section["port"])), Handler).serve_forever()
"""


def _service(r: random.Random) -> Spec:
    port = r.randint(8100, 8999)
    greeting = f"{r.choice(WORDS)}-{r.choice(WORDS)}-{r.randint(10, 99)}"
    wrong = f"/srv/{r.choice(WORDS)}-data"
    return Spec(
        instruction="The service in /app/service does not start: `bash /app/service/start.sh` exits at once and "
        f"it should answer HTTP GET on 127.0.0.1:{port} with the greeting stored under /app/service/data. "
        "Find out why (read service.log after a start) and fix its configuration; do not change server.py. "
        "You need not leave it running.",
        app={
            "service/server.py": _SERVER,
            "service/service.ini": f"[service]\nport = {port}\ndata_dir = {wrong}\n",
            "service/data/greeting.txt": greeting + "\n",
            "service/start.sh": '#!/bin/bash\ncd "$(dirname "$0")"\nexec python3 server.py >> service.log 2>&1\n',
        },
        solve="sed -i 's|^data_dir = .*|data_dir = /app/service/data|' /app/service/service.ini\n",
        check="import time, urllib.request\nassert 'sys.exit' in (APP / 'service/server.py').read_text()\n"
        "proc = subprocess.Popen([*AGENT, 'bash', str(APP / 'service/start.sh')], env=AGENT_ENV)\ntry:\n"
        "    for _ in range(300):  # up to 30 s: a loaded machine starts it slowly\n        try:\n"
        f"            body = urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=1).read().decode()\n"
        "            break\n        except OSError:\n            assert proc.poll() is None, 'service exited'\n"
        "            time.sleep(0.1)\n    else:\n        raise AssertionError('no answer')\n"
        f"    assert body == {greeting!r}, body\nfinally:\n    proc.kill()\n",
        category="failing service",
        near_miss="sed -i 's|^data_dir = .*|data_dir = /app/service|' /app/service/service.ini\n",
    )


def _tarball(files: dict[str, str]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def _archive(r: random.Random) -> Spec:
    files = {}
    for i in range(r.randint(8, 12)):
        folder = r.choice(["etc", "etc/app", "var/lib", "home/ops"])
        ext = r.choice(["conf", "conf", "txt", "bak"])
        files[f"{folder}/{r.choice(WORDS)}{i}.{ext}"] = f"{r.choice(WORDS)} = {r.randint(0, 9)}\n"
    files[f"etc/{r.choice(WORDS)}.bak"] = "old\n"  # at least one file that must stay in the archive
    confs = {k: v for k, v in files.items() if k.endswith(".conf")}
    return Spec(
        instruction="/app/backup.tar.gz is a backup. Restore only its *.conf files into /app/restored/, keeping "
        "their paths inside the archive (etc/x.conf goes to /app/restored/etc/x.conf). Nothing else may be "
        "extracted there.",
        app={"backup.tar.gz": _tarball(files)},
        solve="mkdir -p /app/restored && tar -xzf /app/backup.tar.gz -C /app/restored --wildcards '*.conf'\n",
        near_miss="mkdir -p /app/restored && tar -xzf /app/backup.tar.gz -C /app/restored\n",
        check=f"EXPECTED = {json.dumps(confs, sort_keys=True)}\n"
        "got = {p.relative_to(APP / 'restored').as_posix(): p.read_text() "
        "for p in (APP / 'restored').rglob('*') if p.is_file()}\nassert got == EXPECTED, got\n",
        category="files",
    )


def _large_files(r: random.Random) -> Spec:
    limit = r.choice([1000, 2000, 4096])
    files = {}
    for i in range(r.randint(10, 14)):
        size = r.choice([limit - 1, limit, limit + 1, r.randint(10, 3 * limit)])
        files[f"data/{r.choice(['a', 'b', 'b/c'])}/{r.choice(WORDS)}{i}.bin"] = "x" * (limit if i == 0 else size)
    big = sorted(k.removeprefix("data/") for k, v in files.items() if len(v) > limit)
    return Spec(
        instruction=f"List every file under /app/data larger than {limit} bytes (strictly) in /app/large.txt: "
        "one path per line, relative to /app/data (e.g. a/x.bin), sorted.",
        app=files,
        solve=f"cd /app/data && find . -type f -size +{limit}c | sed 's|^./||' | sort > /app/large.txt\n",
        near_miss=f"cd /app/data && find . -type f -size +{limit - 1}c | sed 's|^./||' | sort > /app/large.txt\n",
        check=f"assert (APP / 'large.txt').read_text().split() == {big!r}\n",
        category="files",
    )


def _env_edit(r: random.Random) -> Spec:
    keys = r.sample([w.upper() for w in WORDS], 6)
    values = {k: str(r.randint(1, 999)) for k in keys}
    change, drop = keys[1], keys[4]
    new = str(r.randint(1000, 9999))
    text = "# app settings\n" + "".join(f"{k}={v}\n" for k, v in values.items())
    want = (
        "# app settings\n"
        + "".join(f"{k}={new if k == change else v}\n" for k, v in values.items() if k != drop)
        + "DEBUG=false\n"
    )
    return Spec(
        instruction=f"Edit /app/app.env: set {change} to {new}, remove the {drop} line, and append DEBUG=false as "
        "the last line. Keep every other line (and their order) as it is.",
        app={"app.env": text},
        solve=f"sed -i -e 's/^{change}=.*/{change}={new}/' -e '/^{drop}=/d' /app/app.env\n"
        "echo DEBUG=false >> /app/app.env\n",
        near_miss=f"sed -i -e 's/^{change}=.*/{change}={new}/' /app/app.env\necho DEBUG=false >> /app/app.env\n",
        check=f"assert (APP / 'app.env').read_text() == {want!r}\n",
        category="text processing",
    )


def _dedupe(r: random.Random) -> Spec:
    people = [f"{r.choice(WORDS)}.{r.choice(WORDS)}@example.org" for _ in range(r.randint(8, 12))]
    lines = []
    for p in people:
        for _ in range(r.randint(1, 3)):
            lines.append(r.choice([p, p.upper(), p.capitalize(), f"  {p} "]))
    lines.append(f"  {people[0]} ")  # surrounding spaces that must go
    r.shuffle(lines)
    want = sorted({p.lower() for p in people})
    return Spec(
        instruction="/app/emails.txt has one address per line with duplicates that differ in case and surrounding "
        "spaces. Write /app/unique.txt: each address once, lower case, trimmed, sorted.",
        app={"emails.txt": "\n".join(lines) + "\n"},
        solve="tr 'A-Z' 'a-z' < /app/emails.txt | sed 's/^ *//; s/ *$//' | LC_ALL=C sort -u > /app/unique.txt\n",
        near_miss="tr 'A-Z' 'a-z' < /app/emails.txt | LC_ALL=C sort -u > /app/unique.txt\n",
        check=f"assert (APP / 'unique.txt').read_text().splitlines() == {want!r}\n",
        category="text processing",
    )


def _rename(r: random.Random) -> Spec:
    numbers = sorted(r.sample(range(1, 9999), r.randint(6, 9)))
    files = {f"photos/IMG_{n:04d}.JPG": f"jpeg {n}\n" for n in numbers}
    files["photos/notes.txt"] = "keep me\n"
    want = {f"photo-{n:04d}.jpg": f"jpeg {n}\n" for n in numbers} | {"notes.txt": "keep me\n"}
    return Spec(
        instruction="Rename every /app/photos/IMG_NNNN.JPG to photo-NNNN.jpg (same number, lower-case extension) "
        "in the same directory. Leave other files alone.",
        app=files,
        solve='cd /app/photos && for f in IMG_*.JPG; do n="${f#IMG_}"; mv "$f" "photo-${n%.JPG}.jpg"; done\n',
        near_miss='cd /app/photos && for f in IMG_*.JPG; do n="${f#IMG_}"; mv "$f" "photo-$n"; done\n',
        check=f"want = {want!r}\n"
        "got = {p.name: p.read_text() for p in (APP / 'photos').iterdir()}\nassert got == want, got\n",
        category="files",
    )


def _git_revert(r: random.Random) -> Spec:
    files = {"VERSION": f"1.{r.randint(0, 9)}.{r.randint(0, 9)}\n", "config/settings.ini": "[app]\n"}
    steps = []
    for i in range(r.randint(3, 5)):
        key = r.choice(WORDS)
        files["config/settings.ini"] += f"{key} = {r.randint(1, 99)}\n"
        files[f"src/{key}{i}.txt"] = f"{r.choice(WORDS)} {r.choice(WORDS)}\n"
        steps.append((f"add {key}", dict(files)))
    bad = dict(files)
    del bad["config/settings.ini"]
    bad["VERSION"] = "broken\n"
    subject = f"cleanup {r.choice(WORDS)}"
    steps.append((subject, bad))
    day = int(datetime(2026, 1, 1, 12, tzinfo=timezone.utc).timestamp())
    return Spec(
        instruction=f"The latest commit of the git repository /app/repo ('{subject}') broke it: it deleted "
        "config/settings.ini and overwrote VERSION. Undo that commit with a new commit on top (do not rewrite "
        "history) and leave the working tree clean.",
        app={},
        repository=tuple(Commit(message, tree, day + 86400 * n) for n, (message, tree) in enumerate(steps)),
        solve="cd /app/repo && git revert --no-edit HEAD\n",
        check="def git(*args):\n    # as the agent's uid, with no hook or fsmonitor: the repository's own config runs nothing of ours\n"
        "    return as_agent([*GIT, '-C', str(APP / 'repo'), *args], check=True).stdout.strip()\n\n\n"
        f"assert git('rev-list', '--count', 'HEAD') == '{len(steps) + 1}'\n"
        f"assert git('log', '-1', '--format=%s', 'HEAD~1') == {subject!r}\n"
        "assert git('rev-parse', 'HEAD^{tree}') == git('rev-parse', 'HEAD~2^{tree}')\n"
        "assert git('status', '--porcelain') == ''\n"
        f"assert (APP / 'repo' / 'VERSION').read_text() == {files['VERSION']!r}\n",
        category="git repository to repair",
        near_miss="cd /app/repo && git reset -q --hard HEAD~1\n",
    )


def _setup_script(history: tuple[Commit, ...]) -> str:
    """``environment/setup.sh`` of a shipped task with a repository: ``history`` committed by git at build time."""
    lines = ["set -euo pipefail", f"mkdir -p /app/{REPO} && cd /app/{REPO}", "git init -q -b main ."]
    for commit in history:
        lines.append("git rm -rq --ignore-unmatch . >/dev/null")
        for rel, text in sorted(commit.files.items()):
            lines.append(f"mkdir -p \"$(dirname '{rel}')\" && printf '%b' {json.dumps(text)} > '{rel}'")
        stamp = datetime.fromtimestamp(commit.timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(
            f"git add -A && GIT_AUTHOR_DATE={stamp} GIT_COMMITTER_DATE={stamp} git commit -qm '{commit.message}'"
        )
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Entry:
    name: str
    family: str
    seed: int
    split: str
    build: Callable[[random.Random], Spec]


@dataclass(frozen=True)
class Family:
    """One generator and the seeds of its instances; ``held_out`` families are all ``validation`` or all ``test``
    (new kinds of task), the others give their first two seeds to ``train`` and hold the third out (new inputs)."""

    name: str
    build: Callable[[random.Random], Spec]
    seed: int
    held_out: str | None = None


FAMILIES: tuple[Family, ...] = (
    Family("sort-inbox", _files_sort, 101),
    Family("count-word", _word_count, 102),
    Family("log-error-codes", _log_errors, 103),
    Family("csv-region-totals", _csv_totals, 104),
    Family("fix-series-script", _fix_bash, 105),
    Family("broken-service", _service, 106),
    Family("restore-configs", _archive, 107),
    Family("edit-env-file", _env_edit, 108),
    Family("revert-bad-commit", _git_revert, 109),
    Family("rename-photos", _rename, 110),
    Family("json-order-report", _json_join, 201, held_out="validation"),
    Family("large-files", _large_files, 202, held_out="validation"),
    Family("fix-mean-program", _fix_python, 301, held_out="test"),
    Family("dedupe-emails", _dedupe, 302, held_out="test"),
)
"""The task families. Add one by adding an entry (and regenerating)."""
INSTANCES = 3
"""Instances (seeds) per family: ``<family>``, ``<family>-2``, ``<family>-3`` (seeds ``seed``, ``seed + 1000``,
``seed + 2000``)."""


def _entries() -> tuple[Entry, ...]:
    entries = []
    for index, family in enumerate(FAMILIES):
        for k in range(INSTANCES):
            if family.held_out is not None:
                split = family.held_out
            else:  # held-out seeds of the training families alternate between validation and test
                split = "train" if k < INSTANCES - 1 else ("validation" if index % 2 == 0 else "test")
            name = family.name if k == 0 else f"{family.name}-{k + 1}"
            entries.append(Entry(name, family.name, family.seed + 1000 * k, split, family.build))
    return tuple(entries)


SUITE: tuple[Entry, ...] = _entries()
"""The shipped suite: every instance of every family, with its split."""

_CHECK_HEAD = """\
# Generated by shell_env.server.generate_tasks: exits 0 iff the end state is correct.
import json
import os
import subprocess
import tempfile
from pathlib import Path

APP = Path("/app")
# Programs the agent wrote or controls run as its unprivileged uid: whatever they do, they cannot write the reward
# (when the tests themselves run unprivileged, they run as they are).
AGENT = ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--"] if os.geteuid() == 0 else []
AGENT_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
GIT = ["git", "-c", "core.fsmonitor=", "-c", "core.hooksPath=/dev/null"]
SCRATCH = Path("/tests/scratch") if AGENT else Path(tempfile.mkdtemp())  # root's: the agent cannot fill or change it
SCRATCH.mkdir(exist_ok=True)


def as_agent(argv, **kwargs):
    kwargs.setdefault("timeout", 10)
    return subprocess.run([*AGENT, *argv], capture_output=True, text=True, env=AGENT_ENV, **kwargs)

"""

_TEST_SH = f"""\
#!/bin/bash
# Harbor verifier: always (re)writes the reward, 1 for a correct end state, 0 otherwise.
mkdir -p "$(dirname {CONTAINER_REWARD_TXT})"
if timeout 60 python3 /tests/check.py; then
  echo 1 > {CONTAINER_REWARD_TXT}
else
  echo 0 > {CONTAINER_REWARD_TXT}
fi
"""

_DOCKERFILE = f"""\
ARG BASE_IMAGE={BASE_IMAGE}
FROM ${{BASE_IMAGE}}
WORKDIR /app
COPY app/ /app/
RUN chmod -R a+rwX /app && mkdir -p /logs/verifier && chmod -R a+rwX /logs
"""

_GIT_HEAD = f"""\
ARG BASE_IMAGE={BASE_IMAGE}
FROM ${{BASE_IMAGE}}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends git \\
    && rm -rf /var/lib/apt/lists/* \\
    && git config --system safe.directory '*' \\
    && git config --system user.name agent && git config --system user.email agent@example.org
WORKDIR /app
"""
_DOCKERFILE_GIT = (
    _GIT_HEAD
    + """\
COPY setup.sh /tmp/setup.sh
RUN bash /tmp/setup.sh && rm /tmp/setup.sh \\
    && chmod -R a+rwX /app && mkdir -p /logs/verifier && chmod -R a+rwX /logs
"""
)
"""A shipped task with a repository: git installed, the repository made by ``setup.sh``."""
_DOCKERFILE_GIT_FILES = _GIT_HEAD + _DOCKERFILE.split("WORKDIR /app\n", 1)[1]
"""A generated instance with a repository: git installed as in its family's image, the repository among the files
(our env runs the instance on the family's image and unpacks the files; Harbor can build this one as it is)."""


def _toml(entry: Entry, spec: Spec, image_of: str | None = None) -> str:
    return (
        'schema_version = "1.4"\n\n'
        "[metadata]\n"
        'author_name = "openenv-echo"\n'
        f'category = "{spec.category}"\n'
        'difficulty = "easy"\n\n'
        "[metadata.openenv_echo]\n"
        f'family = "{entry.family}"\n'
        f'split = "{entry.split}"\n'
        f"seed = {entry.seed}\n" + (f'image_of = "{image_of}"\n' if image_of is not None else "") + "pids = 128\n"
        "command_timeout_sec = 30.0\n\n"
        "[verifier]\ntimeout_sec = 120.0\n\n"
        "[agent]\ntimeout_sec = 600.0\n\n"
        "[environment]\n"
        "build_timeout_sec = 300.0\n"
        "cpus = 1\n"
        "memory_mb = 512\n"
        "storage_mb = 256\n"
    )


def _write(path: Path, content: str | bytes, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    path.chmod(0o755 if executable else 0o644)


def write_task(entry: Entry, out: Path, image_of: str | None = None) -> Path:
    """Write one task directory from its seed (replacing what was there)."""
    spec = entry.build(random.Random(entry.seed))
    task = out / entry.name
    if task.exists():
        shutil.rmtree(task)
    _write(task / "task.toml", _toml(entry, spec, image_of))
    _write(task / "instruction.md", spec.instruction + "\n")
    app = dict(spec.app)
    if spec.repository is None:
        dockerfile = _DOCKERFILE
    elif image_of is None:
        dockerfile = _DOCKERFILE_GIT
        _write(task / "environment" / "setup.sh", _setup_script(spec.repository), executable=True)
    else:
        dockerfile = _DOCKERFILE_GIT_FILES
        app |= {f"{REPO}/{rel}": data for rel, data in repository_files(spec.repository).items()}
    _write(task / "environment" / "Dockerfile", dockerfile)
    for rel, content in sorted(app.items()):
        _write(task / "environment" / "app" / rel, content, executable=rel.endswith(".sh"))
    _write(task / "solution" / "solve.sh", "#!/bin/bash\nset -euo pipefail\ncd /app\n" + spec.solve, executable=True)
    _write(
        task / "solution" / "near_miss.sh", "#!/bin/bash\nset -uo pipefail\ncd /app\n" + spec.near_miss, executable=True
    )
    _write(task / "tests" / "test.sh", _TEST_SH, executable=True)
    _write(task / "tests" / "check.py", _CHECK_HEAD + spec.check)
    return task


GENERATED_FAMILIES: tuple[Family, ...] = tuple(f for f in FAMILIES if f.held_out is None)
"""The training families whose fresh instances the env generates per seed (``write_instance``): every one but the
held-out families (their kinds of task stay unseen in training)."""


def instance_entry(index: int) -> Entry:
    """The ``index``-th generated training instance: family ``index % len(GENERATED_FAMILIES)``, that family's
    instance ``INSTANCES + index // len(GENERATED_FAMILIES)`` (seed ``family.seed + 1000 * k``: never one of the
    shipped instances, so never a validation or test seed)."""
    if index < 0:
        raise ValueError(f"instance index {index} is negative")
    family = GENERATED_FAMILIES[index % len(GENERATED_FAMILIES)]
    k = INSTANCES + index // len(GENERATED_FAMILIES)
    return Entry(f"{family.name}-g{k + 1}", family.name, family.seed + 1000 * k, "train", family.build)


def write_instance(index: int, out: Path) -> Path:
    """Write the ``index``-th generated instance (``instance_entry``) under ``out`` as a Harbor task that runs on its
    family's shipped image (``image_of``): inputs and expected outputs drawn from its own seed."""
    entry = instance_entry(index)
    return write_task(entry, out, image_of=entry.family)


def generate(out: Path = SUITE_DIR) -> list[Path]:
    """Regenerate the whole suite under ``out`` (task directories not in ``SUITE`` are left alone)."""
    return [write_task(entry, out) for entry in SUITE]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SUITE_DIR, help="suite directory (default: %(default)s)")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)


if __name__ == "__main__":
    main()
