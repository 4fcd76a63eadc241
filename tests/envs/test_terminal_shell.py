"""The virtual shell: realistic output and errors, and no way out of the sandbox."""

from __future__ import annotations

import pytest
from terminal_env.server.commands import new_shell
from terminal_env.server.machine import INCIDENT_KINDS, generate_machine


@pytest.fixture(scope="module")
def machine():
    return generate_machine(11, "disk_full")


@pytest.fixture
def sh(machine):
    return new_shell(machine)


def test_basic_commands_print_what_a_host_prints(sh, machine):
    r = sh.run("cat /etc/hostname")
    assert (r.output, r.exit_code, r.notices) == (machine.hostname + "\n", 0, [])
    assert sh.run("pwd").output == "/root\n"
    assert sh.run("cd /var/log && pwd").output == "/var/log\n"
    assert sh.run("pwd").output == "/var/log\n"  # cd persists across steps
    assert sh.run("whoami").output == "root\n"
    assert sh.run("echo $HOME $USER").output == "/root root\n"
    assert sh.run("uptime").output.startswith(" ") and "load average:" in sh.run("uptime").output
    out = sh.run("ls -la /etc").output
    assert out.startswith("total ") and "hostname" in out and out.splitlines()[1].startswith("drwxr-xr-x")
    assert sh.run("wc -l /etc/passwd").output == f"{machine.fs.get('/etc/passwd').text.count(chr(10))} /etc/passwd\n"


def test_realistic_errors(sh):
    assert sh.run("cat nothere").output == "cat: nothere: No such file or directory\n"
    assert sh.run("cat nothere").exit_code == 1
    r = sh.run("foo --bar")
    assert (r.output, r.exit_code) == ("bash: foo: command not found\n", 127)
    assert sh.run("cat /var/log").output == "cat: /var/log: Is a directory\n"
    assert sh.run("cat /etc/passwd/").output == "cat: /etc/passwd/: Not a directory\n"
    assert sh.run("ls /nope").output == "ls: cannot access '/nope': No such file or directory\n"
    assert sh.run("ls /nope").exit_code == 2
    assert sh.run("cd /nope").output == "bash: cd: /nope: No such file or directory\n"
    assert sh.run("ls -z").output == "ls: invalid option -- 'z'\nTry 'ls --help' for more information.\n"
    assert sh.run("systemctl status nope").output == "Unit nope.service could not be found.\n"
    assert sh.run("grep -E '(' /etc/hosts").output == "grep: Unmatched ( or \\(\n"
    assert sh.run("ls |").output == "bash: syntax error: unexpected end of file\n"
    assert sh.run("| ls").output == "bash: syntax error near unexpected token `|'\n"
    assert sh.run("echo 'open").output == "bash: unexpected EOF while looking for matching `''\n"


@pytest.mark.parametrize(
    "cmd",
    [
        "cat ../../../../etc/passwd",
        "cat /../../etc/passwd",
        "cat /etc/../../../etc/passwd",
        "cd ../../../../../.. && cat etc/passwd",
        "cat ~/../../../etc/passwd",
    ],
)
def test_path_traversal_stays_in_the_virtual_fs(sh, machine, cmd):
    out = sh.run(cmd).output
    assert out == machine.fs.get("/etc/passwd").text
    assert machine.ops_user in out  # the generated users, not the host's


@pytest.mark.parametrize(
    "path",
    [
        "/proc/self/environ",
        "/etc/shadow-",
        "/root/.ssh/id_rsa",
        "/home/runner/.bashrc",
        "/proc/1/cmdline",
        "/sys/kernel/hostname",
    ],
)
def test_host_only_paths_do_not_exist(sh, path):
    out = sh.run(f"cat {path}").output
    assert out.startswith(f"cat: {path}: ") and out.endswith(("No such file or directory\n", "Not a directory\n"))


@pytest.mark.parametrize(
    "cmd,needle",
    [
        ("echo $(cat /etc/passwd)", "command substitution $(...)"),
        ("echo `id`", "command substitution `...`"),
        ("ls &", "background jobs"),
        ("(cat /etc/passwd)", "subshells"),
        ("cat <<EOF", "here-documents"),
        ("diff <(ls) <(ls)", "process substitution"),
        ("rm -rf /", "read-only triage session"),
        ("systemctl restart nginx", "read-only triage session"),
        ("python3 -c 'import os; os.system(\"id\")'", "not available"),
        ("vim /etc/hosts", "interactive"),
        ("find / -name x -exec cat {} \\;", "find -exec is disabled"),
        ("grep -E '(a)\\1' /var/log/syslog", "linear-time regex engine"),
    ],
)
def test_shell_features_are_refused_by_the_harness(sh, cmd, needle):
    r = sh.run(cmd)
    assert r.output == ""  # nothing ran, nothing printed by the "machine"
    assert r.exit_code == 2
    assert len(r.notices) == 1 and needle in r.notices[0] and r.notices[0].startswith("[harness: ")


def test_separators_and_redirects_run_virtually(sh):
    assert sh.run("echo a; echo b").output == "a\nb\n"
    assert sh.run("false && echo no || echo yes").output == "yes\n"
    assert sh.run("ls /nope 2>/dev/null").output == ""
    assert sh.run("ls /nope 2>&1 | wc -l").output == "1\n"
    r = sh.run("echo hi > /tmp/x")
    assert (r.output, r.exit_code) == ("bash: /tmp/x: Read-only file system\n", 1)
    assert sh.run("cat /tmp/x").output == "cat: /tmp/x: No such file or directory\n"  # nothing was written
    assert sh.run("cat < /etc/hostname").output == sh.run("cat /etc/hostname").output


def test_output_floods_are_truncated_with_a_notice(sh):
    r = sh.run("yes")
    assert r.truncated and r.exit_code is None
    assert r.output == "y\n" * 200
    assert len(r.notices) == 1 and r.notices[0].startswith("[harness: output truncated")
    r = sh.run("cat /var/log/*/*-debug.log")  # a 10+ GB generated log
    assert r.truncated and len(r.output.encode()) <= 4096 and "DEBUG" in r.output
    assert "output truncated" in r.notices[0]


def test_runaway_commands_hit_the_work_limit(sh):
    for cmd in ("yes | wc -l", "grep -c nothing /var/log/*/*-debug.log", "yes | sort"):
        r = sh.run(cmd)
        assert r.exit_code == 124 and r.output == ""
        assert "work limit" in r.notices[-1]


@pytest.mark.parametrize(
    "cmd,matches",
    [
        ("echo " + "ab" * 60 + "xc | grep -E '(a|b)*(a|b)*(a|b)*c'", True),
        ("echo " + "ab" * 1000 + "xc | grep -E '(a|b)*(a|b)*c'", True),
        ("echo " + "ab" * 1000 + "x | grep -E '^(a|b)*(a|b)*c'", False),
        ("echo " + "a" * 3000 + "xc | grep -E '[ab]*[ab]*[ab]*c'", True),
        ("echo " + "a" * 3000 + "! | grep -E '^(a+)+$'", False),
        ("grep -E '(a?){30}a{30}' /etc/hosts", False),
    ],
)
def test_backtracking_regexes_run_in_linear_time(sh, cmd, matches):
    """Each of these runs for seconds to hours in a backtracking engine; RE2 answers at once (and correctly)."""
    r = sh.run(cmd)
    assert r.exit_code == (0 if matches else 1) and not r.notices
    assert bool(r.output) is matches


@pytest.mark.parametrize(
    "cmd", ["grep -P '(a|b)*\\1' /etc/hosts", "grep -P '(?<=a)b' /etc/hosts", "grep -E '(x)\\1' /etc/hosts"]
)
def test_regexes_needing_backtracking_are_refused(sh, cmd):
    r = sh.run(cmd)
    assert r.exit_code == 2 and r.output == ""
    assert "linear-time regex engine" in r.notices[-1]


def test_common_patterns_still_work(sh, machine):
    log = "/var/log/syslog"
    n = sum("CRON" in ln and "CMD" in ln for ln in machine.fs.get(log).text.splitlines())
    assert sh.run(f"grep -c 'CRON.*CMD' {log}").output == f"{n}\n"
    assert sh.run(f"grep -ci 'cron.*cmd' {log}").output == f"{n}\n"
    assert sh.run("grep -cE '(debian|run)-(sa1|parts)' /var/log/syslog").exit_code == 0
    assert sh.run("grep -oE '[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+' /etc/hosts | head -n 1").output == "127.0.0.1\n"


def test_huge_and_binary_arguments(sh):
    r = sh.run("cat " + "A" * 3000)
    assert r.output == "cat: " + "A" * 3000 + ": No such file or directory\n"
    r = sh.run("ls " + " ".join(f"/x{i}" for i in range(500)))
    assert r.truncated and r.output.startswith("ls: cannot access '/x0'")
    assert sh.run("cat \u2603").output == "cat: \u2603: No such file or directory\n"
    r = sh.run("cat \udcff")  # a lone surrogate (valid JSON escape, invalid text)
    assert r.output == "" and "not valid Unicode" in r.notices[0]
    assert sh.run("cat /usr/bin/ls").output.startswith("\x7fELF")


def test_grep_flags(sh, machine):
    log = "/var/log/syslog"
    lines = machine.fs.get(log).text.splitlines()
    cron = [ln for ln in lines if "CRON" in ln]
    assert sh.run(f"grep -c CRON {log}").output == f"{len(cron)}\n"
    assert sh.run(f"grep -ic cron {log}").output == f"{len(cron)}\n"
    assert sh.run(f"grep -vc CRON {log}").output == f"{len(lines) - len(cron)}\n"
    first = sh.run(f"grep -n CRON {log} | head -n 1").output
    assert first == f"{lines.index(cron[0]) + 1}:{cron[0]}\n"
    assert sh.run("grep -l CRON /var/log/syslog /etc/hosts").output == "/var/log/syslog\n"
    assert sh.run("grep -rl nameserver /etc").output == "/etc/resolv.conf\n"
    assert sh.run("grep -E 'local(host|domain)' /etc/hosts").output.startswith("127.0.0.1 localhost")
    assert sh.run("grep -q CRON /var/log/syslog && echo found").output == "found\n"


def test_every_incident_leaves_evidence():
    """Each kind is visible to the commands a triager would run (what the expert relies on)."""
    for i, kind in enumerate(INCIDENT_KINDS):
        m = generate_machine(100 + i, kind)
        sh = new_shell(m)
        svc = m.incident.service
        text = {
            "disk_full": sh.run("df -h /var").output,
            "oom_killed": sh.run("grep -i 'killed process' /var/log/kern.log").output,
            "bad_config": sh.run(f"journalctl -u {svc} -n 20").output,
            "cert_expired": sh.run(f"openssl x509 -in /etc/{svc}/tls/{svc}.crt -noout -checkend 0").output,
            "db_pool_exhausted": sh.run(f"grep -i 'acquiring connection' /var/log/{svc}/{svc}.log").output,
            "dns_misconfig": sh.run("cat /etc/resolv.conf").output,
            "port_conflict": sh.run("ss -tlnp").output,
        }[kind]
        expected = {
            "disk_full": "100%",
            "oom_killed": "Out of memory",
            "bad_config": "invalid configuration",
            "cert_expired": "Certificate will expire",
            "db_pool_exhausted": "timeout acquiring",
            "dns_misconfig": m.nameserver,
            "port_conflict": f":{m.services[svc].port}",
        }[kind]
        assert expected in text, (kind, text)


def test_same_seed_same_bytes_different_seeds_different_machines():
    cmds = [
        "ls -la /var/log",
        "ps aux",
        "df -h",
        "tail -n 5 /var/log/syslog",
        "systemctl --failed",
        "date",
        "cat /etc/hosts",
        "grep -c . /var/log/nginx/access.log",
        "yes",
        "ss -tlnp",
        "free -h",
    ]
    a, b = new_shell(generate_machine(5)), new_shell(generate_machine(5))
    outs = [a.run(c) for c in cmds]
    assert outs == [b.run(c) for c in cmds]
    c = new_shell(generate_machine(6))
    assert [r.output for r in outs] != [c.run(x).output for x in cmds]
    hosts = {generate_machine(s).hostname for s in range(12)}
    assert len(hosts) >= 9


WORDS = [
    "ls",
    "cat",
    "grep",
    "head",
    "tail",
    "wc",
    "find",
    "du",
    "df",
    "ps",
    "sort",
    "uniq",
    "cut",
    "echo",
    "cd",
    "systemctl",
    "journalctl",
    "ss",
    "curl",
    "dig",
    "openssl",
    "x509",
    "status",
    "-n",
    "-5",
    "-la",
    "-rn",
    "-E",
    "-c",
    "-v",
    "-h",
    "-u",
    "--max-depth=1",
    "/",
    "/var/log",
    "/etc/hosts",
    "..",
    "*",
    "*.log",
    "/var/log/*",
    "~",
    "$HOME",
    "'a b'",
    '"$USER"',
    "|",
    ";",
    "&&",
    "||",
    ">",
    "2>&1",
    "<",
    "$(",
    "`",
    "\\",
    "(",
    ")",
    "&",
    "nginx",
    "/proc/meminfo",
    "-f",
    "-k",
    "3",
    "x[",
    "[[:digit:]]",
    "(a|b)+",
    "\u00e9t\u00e9",
    "\t",
]


@pytest.fixture(scope="module")
def fuzz_shell():
    return new_shell(generate_machine(23))


def test_random_command_lines_never_break_the_shell(fuzz_shell):
    import hypothesis

    st = hypothesis.strategies

    @hypothesis.settings(
        max_examples=250, deadline=None, derandomize=True, suppress_health_check=list(hypothesis.HealthCheck)
    )
    @hypothesis.given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8), st.text(max_size=12))
    def check(words: list[str], noise: str) -> None:
        line = " ".join(words) + (" " + noise if noise.strip() else "")
        r = fuzz_shell.run(line)
        assert not any("internal error" in n for n in r.notices), (line, r.notices)
        assert len(r.output.encode("utf-8", "surrogatepass")) <= 4096 and r.output.count("\n") <= 200
        fuzz_shell.cwd = "/root"

    check()


_PIPE_TEXT = r"printf 'b:2\nalpha:beta:gamma\nx\n\nb:2\nlonger line with spaces\n'"


@pytest.mark.parametrize(
    "stage",
    [
        "sort",
        "head -n 2",
        "tail -n 2",
        "uniq",
        "grep b",
        "wc -l",
        "cut -d: -f2",
        *(
            f"cut -c {spec}"
            for spec in ["1-3", "2", "3-", "-4", "1,3,5", "2-4,3-6", "5-9,1-2", "4-4,1-1", "1-99999999"]
        ),
    ],
)
def test_a_pipe_carries_lines_as_bash_does(sh, stage):
    # printf passes its whole output on as one chunk: the next stage still reads it line by line
    import subprocess

    line = f"{_PIPE_TEXT} | {stage}"
    bash = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True).stdout
    assert sh.run(line).output == bash


@pytest.mark.parametrize(
    "line",
    [
        "false; echo $?",
        "true; echo $?",
        "false || echo $?",
        "false && echo a; echo $?",
        "true && false; echo $?",
        "false; true; echo $?",
        "false; echo $? $?",
        "false; echo ${?}; echo $?",
        'false; echo "status $?"',
        "true | false; echo $?",
        "false | true; echo $?",
        "false; echo $? | cat",
        "false; A=$?; echo $A",
        "ls /nonexistent; echo $?",
        "cat /nonexistent; echo $?",
        "cat /nonexistent 2>/dev/null || echo failed $?",
        "grep -q root /etc/passwd; echo $?",
        "grep -q no-such-user-here /etc/passwd; echo $?",
        "A=x; echo $A; A=y; echo $A",
        "cd /tmp; echo $PWD; cd /; echo $PWD",
    ],
)
def test_expansions_see_the_earlier_commands_of_the_line_as_bash_does(sh, line):
    # bash expands each command's words when that command runs: $? is the status of the one before it
    import subprocess

    bash = subprocess.run(["bash", "-c", line], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/")
    assert sh.run(line).output == bash.stdout


def test_status_of_a_missing_command_and_across_steps(sh):
    assert sh.run("nosuchcmd; echo $?").output == "bash: nosuchcmd: command not found\n127\n"
    sh.run("false")
    assert sh.run("echo $?").output == "1\n"  # the last step's status, as in an interactive shell
    assert sh.run('echo $UNSET x; echo "$UNSET" x').output == "x\n x\n"  # unquoted: no word; quoted: an empty one
    assert sh.run("echo $UNSET# not a comment").output == "# not a comment\n"
