"""The command table of the sandbox shell, and what it says about commands it deliberately lacks."""

from __future__ import annotations

from collections.abc import Generator, Iterator

from . import cmd_files as F
from . import cmd_net as N
from . import cmd_services as S
from . import cmd_system as Y
from . import cmd_text as T
from .machine_state import Machine
from .shell import IO, Cmd, CommandTable, Shell

HELP = """Available commands in this triage sandbox (a read-only root shell; pipes |, ;, && and || work):
  files:    ls cat head tail wc find du less more cd pwd
  text:     grep egrep fgrep sort uniq cut echo printf yes
  system:   ps top(-b) df free uptime date hostname uname whoami id dmesg env printenv which history
  services: systemctl (status, list-units, is-active, cat, show) journalctl
  network:  ss openssl(x509) curl(localhost) dig nslookup host getent
  answer:   submit <kind> <service>
"""


def help_(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Generator[str, None, int]:
    sh.notices.append(HELP)
    return 0
    yield  # pragma: no cover


def clear(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Generator[str, None, int]:
    return 0
    yield  # pragma: no cover


COMMANDS: dict[str, Cmd] = {
    "ls": F.ls,
    "cat": F.cat,
    "head": F.head,
    "tail": F.tail,
    "wc": F.wc,
    "find": F.find,
    "du": F.du,
    "cd": F.cd,
    "pwd": F.pwd,
    "less": Y.less,
    "more": Y.less,
    "grep": T.grep,
    "egrep": T.grep,
    "fgrep": T.grep,
    "sort": T.sort,
    "uniq": T.uniq,
    "cut": T.cut,
    "echo": T.echo,
    "printf": T.printf,
    "yes": T.yes,
    "ps": Y.ps,
    "top": Y.top,
    "df": Y.df,
    "free": Y.free,
    "uptime": Y.uptime,
    "date": Y.date,
    "hostname": Y.hostname,
    "uname": Y.uname,
    "whoami": Y.whoami,
    "id": Y.id_,
    "dmesg": Y.dmesg,
    "env": Y.env,
    "printenv": Y.env,
    "which": Y.which,
    "history": Y.history,
    "true": Y.noop,
    "false": Y.noop,
    ":": Y.noop,
    "sleep": Y.sleep,
    "sudo": Y.sudo,
    "clear": clear,
    "help": help_,
    "systemctl": S.systemctl,
    "journalctl": S.journalctl,
    "ss": N.ss,
    "openssl": N.openssl,
    "curl": N.curl,
    "dig": N.dig,
    "nslookup": N.nslookup,
    "host": N.host,
    "getent": N.getent,
}

_READ_ONLY = "`{cmd}` changes the system; this is a read-only triage session (diagnose, then submit)"
_NO_NET = "`{cmd}` needs network access, which this sandbox does not have"
_INTERACTIVE = "`{cmd}` is interactive and not available here; use cat/head/tail/grep"
_MISSING = "`{cmd}` is not available in this sandbox; type `help` for the supported commands"
UNAVAILABLE: dict[str, str] = {
    **dict.fromkeys(
        (
            "rm",
            "mv",
            "cp",
            "touch",
            "mkdir",
            "rmdir",
            "chmod",
            "chown",
            "chgrp",
            "ln",
            "tee",
            "dd",
            "truncate",
            "kill",
            "pkill",
            "killall",
            "reboot",
            "shutdown",
            "halt",
            "poweroff",
            "apt",
            "apt-get",
            "dpkg",
            "snap",
            "pip",
            "pip3",
            "useradd",
            "passwd",
            "mount",
            "umount",
            "crontab",
            "service",
            "logrotate",
            "shred",
            "install",
            "sysctl",
            "iptables",
            "ufw",
        ),
        _READ_ONLY,
    ),
    **dict.fromkeys(
        (
            "ping",
            "wget",
            "ssh",
            "scp",
            "rsync",
            "nc",
            "ncat",
            "telnet",
            "traceroute",
            "tcpdump",
            "nmap",
            "ftp",
            "psql",
            "mysql",
            "redis-cli",
        ),
        _NO_NET,
    ),
    **dict.fromkeys(("vi", "vim", "nano", "emacs", "htop", "watch", "man", "tmux", "screen"), _INTERACTIVE),
    **dict.fromkeys(
        (
            "sed",
            "awk",
            "gawk",
            "python",
            "python3",
            "perl",
            "ruby",
            "node",
            "bash",
            "sh",
            "zsh",
            "xargs",
            "tr",
            "diff",
            "lsof",
            "strace",
            "netstat",
            "ip",
            "ifconfig",
            "file",
            "stat",
            "tac",
            "nl",
            "column",
            "jq",
            "zcat",
            "zgrep",
            "gzip",
            "gunzip",
            "tar",
            "exec",
            "eval",
            "source",
            ".",
            "alias",
            "export",
            "unset",
            "set",
            "exit",
            "logout",
            "timeout",
            "nohup",
            "time",
            "base64",
            "md5sum",
            "sha256sum",
            "strings",
            "hexdump",
            "xxd",
            "od",
            "realpath",
            "readlink",
            "basename",
            "dirname",
            "seq",
            "tree",
            "lsblk",
            "blkid",
            "fdisk",
            "vmstat",
            "iostat",
            "mpstat",
            "sar",
            "w",
            "who",
            "last",
            "lastlog",
            "resolvectl",
            "systemd-resolve",
            "timedatectl",
            "hostnamectl",
            "loginctl",
            "docker",
            "kubectl",
            "crictl",
        ),
        _MISSING,
    ),
}
"""Commands the sandbox refuses, with the harness's reason (a ``warning``, never pretended machine output)."""
UNAVAILABLE["exit"] = "`exit` would end the session; answer with `submit <kind> <service>` instead"
UNAVAILABLE["logout"] = UNAVAILABLE["exit"]

TABLE = CommandTable(COMMANDS, UNAVAILABLE)


def new_shell(machine: Machine, **options: int) -> Shell:
    """A shell on ``machine`` with the sandbox's command table (``options``: ``Shell``'s limits)."""
    return Shell(machine, TABLE, **options)
