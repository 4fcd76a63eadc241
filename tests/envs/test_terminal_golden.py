"""Seeded terminal worlds are fixed: each seed gives the same files, state and command output, byte for byte.

A seed names a task (an RL dataset is a list of seeds), so a refactoring of the world builder or of a command must
not change a single byte of what a seed produces. The digests below were computed before the long functions of the
world writer, ``grep`` and ``systemctl`` were split; a deliberate change to what the worlds contain updates them
(print the new ones with ``python -m tests.envs.test_terminal_golden``) and says so in its commit.
"""

from __future__ import annotations

import dataclasses
import hashlib

from terminal_env.server.commands import new_shell
from terminal_env.server.machine import INCIDENT_KINDS, generate_machine
from terminal_env.server.machine_state import Machine
from terminal_env.server.vfs import Dir, File

# plain seeds (their incident drawn by the seed) and one forced machine per incident kind
WORLDS: list[tuple[int, str | None]] = [(s, None) for s in range(8)] + [
    (300 + i, kind) for i, kind in enumerate(INCIDENT_KINDS)
]
LAZY_SAMPLE = 64  # lines read from each end of a lazy (huge) file, and every len/LAZY_SAMPLE-th line between

GREP = [
    "grep -c CRON /var/log/syslog",
    "grep -ic cron /var/log/syslog",
    "grep -vc CRON /var/log/syslog",
    "grep -in error /var/log/syslog | head -n 20",
    "grep -v CRON /var/log/syslog | tail -n 5",
    "grep -rl nameserver /etc",
    "grep -r --include='*.conf' -n listen /etc",
    "grep -rn --exclude-dir=ssl --exclude='*.pem' -i port /etc | head -n 30",
    "grep -rc . /etc/nginx",
    "cd /etc && grep -r localhost | head -n 5",
    "grep -L root /etc/passwd /etc/hosts",
    "grep -l root /etc/passwd /etc/hosts",
    "grep -o '[0-9]*\\.[0-9]*\\.[0-9]*\\.[0-9]*' /var/log/nginx/access.log | head -n 5",
    "grep -Ei -C 2 'error|fail' /var/log/syslog | head -n 40",
    "grep -A3 -m2 CRON /var/log/syslog",
    "grep -A2 -B1 -n -m3 sshd /var/log/auth.log",
    "grep -B2 -n sshd /var/log/auth.log | head -n 20",
    "grep -w root /etc/passwd",
    "grep -x '127.0.0.1 localhost' /etc/hosts",
    "grep -F . /etc/hostname",
    "grep -P 'ssh' /etc/passwd",
    "grep -e root -e daemon /etc/passwd",
    "grep -H root /etc/passwd",
    "grep -h . /etc/hosts /etc/hostname",
    "egrep 'local(host|domain)' /etc/hosts",
    "fgrep -c . /etc/hosts",
    "cat /etc/hosts | grep -n local",
    "grep -c . /usr/bin/bash /usr/bin/cat /etc/hostname",
    "grep -l x /usr/bin/bash; grep -L zzzz /usr/bin/bash; grep x /usr/bin/bash",
    "grep -vc x /usr/bin/bash",
    "grep -q CRON /var/log/syslog",
    "grep -q nope /var/log/syslog /nonexistent",
    "grep -s x /nonexistent",
    "grep x /nonexistent",
    "grep x /etc",
    "grep -m x /etc/hosts",
    "grep -A x y /etc/hosts",
    "grep --bogus",
    "grep",
    "grep -f /etc/hosts x",
    "grep '\\(a\\)\\1' /etc/hosts",
    "grep 'a[' /etc/hosts",
]
SYSTEMCTL = [
    "systemctl",
    "systemctl status",
    "systemctl status nosuch nginx",
    "systemctl is-active nginx nosuch",
    "systemctl is-active -q nginx",
    "systemctl is-active",
    "systemctl is-failed nginx",
    "systemctl is-enabled nginx nosuch ufw",
    "systemctl cat nginx nosuch",
    "systemctl show nginx",
    "systemctl show",
    "systemctl show -p MainPID,ActiveState --value nginx",
    "systemctl list-units",
    "systemctl list-units --all --no-pager",
    "systemctl list-units --state=running",
    "systemctl list-units --state=failed --no-legend",
    "systemctl list-units --state=bogus",
    "systemctl list-unit-files",
    "systemctl list-unit-files --no-legend",
    "systemctl --failed",
    "systemctl list-units --failed",
    "systemctl restart nginx",
    "systemctl frob",
    "systemctl --bogus",
]
PINNED = {
    "files": "c3036cb68fc0db2de4b23427604a8eccbb7ebd1ea38c1350daa49c4a53e07fa7",
    "outputs": "627a08ce47da54d7b3afe82a8b3f1bfe6a6db5bb581c469436e7536e06b45233",
}


def _file_bytes(node: File) -> bytes:
    if node.lazy is not None:
        n = node.lazy.count
        picks = sorted({*range(min(n, LAZY_SAMPLE)), *range(max(0, n - LAZY_SAMPLE), n), *range(0, n, max(1, n // 64))})
        body = f"lazy {n} {node.lazy.width}\n" + "".join(node.lazy.line(i) + "\n" for i in picks)
    else:
        body = f"text {node.text!r} {node.binary} {node.declared_size}"
    return body.encode()


def world_digest(m: Machine) -> str:
    """Every path with its metadata and content (lazy files sampled), then the rest of the machine's state."""
    h = hashlib.sha256()
    for path, node in m.fs.walk("/"):
        kind = "d" if isinstance(node, Dir) else "f"
        h.update(f"{kind} {path} {node.mode} {node.owner} {node.group} {node.mtime}\n".encode())
        if isinstance(node, File):
            h.update(_file_bytes(node))
    state = {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "fs"}
    h.update(repr(state).encode())
    return h.hexdigest()


def outputs_digest(m: Machine) -> str:
    """What grep, systemctl and journalctl print (output, exit code, notices) for a fixed set of command lines."""
    sh = new_shell(m)
    lines = [*GREP, *SYSTEMCTL]
    lines += [f"systemctl status {name}" for name in m.services]
    lines += [f"systemctl status {m.incident.service}.service nginx", f"journalctl -u {m.incident.service} -n 20"]
    h = hashlib.sha256()
    for line in lines:
        r = sh.run(line)
        h.update(repr((line, r.output, r.exit_code, r.notices)).encode())
    return h.hexdigest()


def digests() -> dict[str, str]:
    files, outputs = hashlib.sha256(), hashlib.sha256()
    for seed, kind in WORLDS:
        m = generate_machine(seed, kind)
        files.update(world_digest(m).encode())
        outputs.update(outputs_digest(m).encode())
    return {"files": files.hexdigest(), "outputs": outputs.hexdigest()}


def test_seeded_worlds_and_outputs_are_byte_identical_to_the_pinned_digests():
    assert digests() == PINNED


def test_the_digests_see_a_one_byte_change():
    m = generate_machine(0)
    before = world_digest(m)
    node = m.fs.get("/etc/hostname")
    assert isinstance(node, File) and node.text is not None
    node.text += " "
    assert world_digest(m) != before


if __name__ == "__main__":
    print(digests())
