"""The world's files: a built world written into the virtual filesystem of the final ``Machine``.

Everything the shell can read is produced here from the builder's structured state: configs, unit files, app
logs in their runtime's format, syslog/kern.log/auth.log from the journal, nginx logs, /etc and /proc files.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING, Any

from . import catalog as C
from .machine_state import JournalEntry, Machine, Process
from .timefmt import clf_ts, nginx_error_ts, syslog_ts
from .vfs import VFS, Dir, File, join

if TYPE_CHECKING:
    from .world_builder import AppState, Builder

KTHREADS = (
    "kthreadd",
    "rcu_gp",
    "rcu_par_gp",
    "slub_flushwq",
    "netns",
    "kworker/0:0H-events_highpri",
    "mm_percpu_wq",
    "rcu_tasks_kthread",
    "ksoftirqd/0",
    "rcu_preempt",
    "migration/0",
    "cpuhp/0",
    "kdevtmpfs",
    "kauditd",
    "khungtaskd",
    "oom_reaper",
    "kswapd0",
    "jbd2/nvme0n1p1-8",
    "jbd2/nvme1n1-8",
)


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("|".join(map(str, parts)).encode()).digest()


def _pem(label: str, seed: object, nbytes: int) -> str:
    raw = b"".join(_digest(seed, i) for i in range(nbytes // 32 + 1))[:nbytes]
    b64 = base64.b64encode(raw).decode()
    body = "\n".join(b64[i : i + 64] for i in range(0, len(b64), 64))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n"


def _config_text(a: AppState, values: dict[str, dict[str, str]]) -> str:
    head = f"# {a.spec.description} configuration\n# Managed by config-mgmt; see /etc/{a.name}/README before editing.\n"
    if a.config_fmt == "yaml":
        out = [head.replace("\n# ", "\n# ")]
        for sec, kv in values.items():
            out.append(f"{sec}:\n")
            for k, v in kv.items():
                quoted = v if v.replace(".", "").replace("-", "").isdigit() else f'"{v}"'
                out.append(f"  {k}: {quoted}\n")
        return "".join(out)
    out = [head]
    for sec, kv in values.items():
        out.append(f"\n[{sec}]\n")
        width = max(len(k) for k in kv)
        for k, v in kv.items():
            out.append(f"{k:<{width}} = {v}\n")
    return "".join(out)


def _unit_text(b: Builder, a: AppState) -> str:
    return (
        f"[Unit]\nDescription={a.spec.description}\nAfter=network-online.target\nWants=network-online.target\n"
        f"StartLimitIntervalSec=300\nStartLimitBurst=5\n\n"
        f"[Service]\nType=simple\nUser={a.spec.user}\nGroup={a.spec.user}\nWorkingDirectory=/opt/{a.name}\n"
        f"ExecStart={b.services[a.name].exec_start}\nRestart=on-failure\nRestartSec=10\n"
        f"LimitNOFILE=65536\nEnvironment=APP_ENV=production\n\n"
        f"[Install]\nWantedBy=multi-user.target\n"
    )


def _nginx_site(b: Builder) -> str:
    out = []
    for a in b.apps:
        if a.spec.role == "api":
            out.append(
                f"upstream {a.name.replace('-', '_')} {{\n    server 127.0.0.1:{a.port} max_fails=3 "
                f"fail_timeout=10s;\n    keepalive 32;\n}}\n\n"
            )
    out.append(
        f"server {{\n    listen 80 default_server;\n    listen 443 ssl default_server;\n    server_name "
        f"{b.hostname}.{b.domain} _;\n\n    ssl_certificate /etc/nginx/ssl/{b.hostname}.crt;\n"
        f"    ssl_certificate_key /etc/nginx/ssl/{b.hostname}.key;\n\n    root /var/www/html;\n\n"
        f"    location /healthz {{\n        return 200 'ok';\n    }}\n"
    )
    for a in b.apps:
        if a.spec.role == "api":
            scheme = "https" if a.tls else "http"
            out.append(
                f"\n    location /api/{a.spec.resource} {{\n        proxy_pass {scheme}://"
                f"{a.name.replace('-', '_')};\n        proxy_read_timeout 60s;\n"
                f"        proxy_set_header Host $host;\n        proxy_set_header X-Request-Id $request_id;\n"
            )
            if a.tls:
                out.append(
                    "        proxy_ssl_verify on;\n        proxy_ssl_trusted_certificate "
                    "/etc/ssl/certs/example-internal-ca.pem;\n"
                )
            out.append("    }\n")
    out.append("}\n")
    return "".join(out)


NGINX_CONF = """user www-data;
worker_processes auto;
pid /run/nginx.pid;
include /etc/nginx/modules-enabled/*.conf;

events {
    worker_connections 768;
}

http {
    sendfile on;
    tcp_nopush on;
    types_hash_max_size 2048;
    server_tokens off;

    include /etc/nginx/mime.types;
    default_type application/octet-stream;

    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;

    access_log /var/log/nginx/access.log;
    error_log /var/log/nginx/error.log;

    gzip on;

    include /etc/nginx/conf.d/*.conf;
    include /etc/nginx/sites-enabled/*;
}
"""

BASHRC = """# ~/.bashrc: executed by bash(1) for non-login shells.
[ -z "$PS1" ] && return
HISTCONTROL=ignoreboth
HISTSIZE=1000
HISTFILESIZE=2000
shopt -s histappend
PS1='${debian_chroot:+($debian_chroot)}\\u@\\h:\\w\\$ '
alias ll='ls -alF'
alias la='ls -A'
alias l='ls -CF'
"""


def write_world(b: Builder) -> Machine:
    """The machine ``b`` describes, its files written family by family. The order of the families is part of each
    seed's bytes: they all draw from the builder's one random stream."""
    fs = VFS(default_mtime=b.boot)
    _skeleton(b, fs)
    _etc(b, fs)
    _nginx_files(b, fs)
    if b.has_redis:
        _redis_files(b, fs)
    for a in b.apps:
        _app_configs(b, fs, a)
        _app_units(b, fs, a)
        _app_install(b, fs, a)
    _system_units(b, fs)
    _homes(b, fs)
    _app_logs(b, fs)
    _system_logs(b, fs)
    _nginx_logs(b, fs)
    if b.has_redis:
        _redis_log(b, fs)
    _var_and_run(b, fs)
    procs, mem_used, buffcache, load = _proc_files(b, fs)
    _dir_mtimes(fs, "/")
    return _machine(b, fs, procs, mem_used, buffcache, load)


def _skeleton(b: Builder, fs: VFS) -> None:
    """The directory tree, /dev/null, the binaries in /usr and /boot, nginx's default page."""
    r = b.rng
    for d in (
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/srv",
        "/tmp",
        "/usr/bin",
        "/usr/sbin",
        "/usr/lib",
        "/usr/share",
        "/var/cache",
        "/var/lib",
        "/var/log",
        "/var/tmp",
        "/var/www/html",
        "/mnt",
        "/media",
    ):
        fs.mkdir(d)
    fs.mkdir("/root", mode="drwx------")
    fs.mkdir("/tmp", mode="drwxrwxrwt", mtime=b.now - r.randrange(60, 900))
    fs.add("/dev/null", "", mode="crw-rw-rw-")
    for t in C.BIN_TOOLS:
        fs.add(f"/usr/bin/{t}", mode="-rwxr-xr-x", binary=True, size=r.randrange(30_000, 1_400_000))
    for t in ("nginx", "sshd", "cron", "rsyslogd", "agetty"):
        fs.add(f"/usr/sbin/{t}", mode="-rwxr-xr-x", binary=True, size=r.randrange(60_000, 1_400_000))
    fs.add(
        f"/boot/vmlinuz-{b.kernel}",
        mode="-rw-------",
        binary=True,
        size=11_530_000 + r.randrange(200_000),
        mtime=b.boot - 86400 * 3,
    )
    fs.add(
        f"/boot/initrd.img-{b.kernel}",
        mode="-rw-r--r--",
        binary=True,
        size=29_800_000 + r.randrange(900_000),
        mtime=b.boot - 86400 * 3,
    )
    fs.add(
        "/var/www/html/index.nginx-debian.html",
        "<!DOCTYPE html>\n<html>\n<head>\n<title>Welcome to nginx!</title>\n</head>\n<body>\n"
        "<h1>Welcome to nginx!</h1>\n</body>\n</html>\n",
        mtime=b.boot - 86400 * 40,
    )


def _etc(b: Builder, fs: VFS) -> None:
    """The host's identity, resolver, accounts, mounts, cron and sshd files under /etc."""
    fs.add("/etc/hostname", b.hostname + "\n", mtime=b.boot - 86400 * 90)
    fs.add(
        "/etc/hosts",
        f"127.0.0.1 localhost\n127.0.1.1 {b.hostname}.{b.domain} {b.hostname}\n{b.ip} "
        f"{b.hostname}.{b.domain}\n\n# The following lines are desirable for IPv6 capable hosts\n"
        f"::1     ip6-localhost ip6-loopback\nff02::1 ip6-allnodes\nff02::2 ip6-allrouters\n",
        mtime=b.boot - 86400 * 90,
    )
    fs.add(
        "/etc/resolv.conf",
        f"# This file is managed by man:systemd-resolved(8). Do not edit.\n#\n"
        f'# Run "resolvectl status" to see details about the uplink DNS servers\n'
        f"# currently in use.\n\nnameserver {b.resolv_ns}\noptions edns0 trust-ad\n"
        f"search {b.domain}\n",
        mtime=b.resolv_mtime,
    )
    fs.add(
        "/etc/os-release",
        'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
        'VERSION="22.04.4 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\n'
        'ID_LIKE=debian\nHOME_URL="https://www.ubuntu.com/"\nUBUNTU_CODENAME=jammy\n',
        mtime=b.boot - 86400 * 200,
    )
    users = list(C.PASSWD_SYSTEM)
    for i, a in enumerate(b.apps):
        users.append(f"{a.spec.user}:x:{990 + i}:{990 + i}:{a.spec.description}:/opt/{a.name}:/usr/sbin/nologin")
    users.append(f"{b.ops_user}:x:1000:1000:{b.ops_user}:/home/{b.ops_user}:/bin/bash")
    for i, e in enumerate(b.engineers):
        users.append(f"{e}:x:{1001 + i}:{1001 + i}:{e.capitalize()},,,:/home/{e}:/bin/bash")
    fs.add("/etc/passwd", "\n".join(users) + "\n", mtime=b.boot - 86400 * 30)
    fs.add(
        "/etc/shadow",
        "\n".join(u.split(":")[0] + ":*:19700:0:99999:7:::" for u in users) + "\n",
        mode="-rw-r-----",
        group="shadow",
        mtime=b.boot - 86400 * 30,
    )
    fs.add(
        "/etc/fstab",
        "# /etc/fstab: static file system information.\nLABEL=cloudimg-rootfs\t/\text4\t"
        "discard,errors=remount-ro\t0 1\nLABEL=UEFI\t/boot/efi\tvfat\tumask=0077\t0 1\n"
        "/dev/nvme1n1\t/var\text4\tdefaults,nofail\t0 2\n",
        mtime=b.boot - 86400 * 200,
    )
    fs.add("/etc/timezone", "Etc/UTC\n", mtime=b.boot - 86400 * 200)
    fs.add(
        "/etc/crontab",
        "SHELL=/bin/sh\nPATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin\n\n"
        "# m h dom mon dow user\tcommand\n17 *\t* * *\troot\tcd / && run-parts --report "
        "/etc/cron.hourly\n25 6\t* * *\troot\ttest -x /usr/sbin/anacron || ( cd / && run-parts "
        "--report /etc/cron.daily )\n5 */6\t* * *\troot\t/usr/local/bin/backup-configs.sh "
        ">/dev/null 2>&1\n",
        mtime=b.boot - 86400 * 60,
    )
    fs.add(
        "/etc/ssh/sshd_config",
        "Include /etc/ssh/sshd_config.d/*.conf\nPort 22\nPermitRootLogin no\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM yes\n"
        "X11Forwarding no\nPrintMotd no\nAcceptEnv LANG LC_*\n"
        "Subsystem sftp /usr/lib/openssh/sftp-server\n",
        mtime=b.boot - 86400 * 120,
    )


def _nginx_files(b: Builder, fs: VFS) -> None:
    """nginx's config, its site (every API app behind it) and its TLS certificate."""
    fs.add("/etc/nginx/nginx.conf", NGINX_CONF, mtime=b.boot - 86400 * 50)
    site = _nginx_site(b)
    fs.add("/etc/nginx/sites-available/default", site, mtime=b.boot - 86400 * 20)
    fs.add("/etc/nginx/sites-enabled/default", site, mtime=b.boot - 86400 * 20)
    fs.add(f"/etc/nginx/ssl/{b.hostname}.crt", _pem("CERTIFICATE", (b.seed, "nginx"), 900), mtime=b.boot - 86400 * 20)
    fs.add(
        f"/etc/nginx/ssl/{b.hostname}.key",
        _pem("PRIVATE KEY", (b.seed, "nginxkey"), 1190),
        mode="-rw-------",
        mtime=b.boot - 86400 * 20,
    )
    b.certs.setdefault(
        f"/etc/nginx/ssl/{b.hostname}.crt",
        {
            "subject": f"CN = {b.hostname}.{b.domain}",
            "issuer": "C = US, O = Let's Encrypt, CN = R3",
            "not_before": b.now - 30 * 86400,
            "not_after": b.now + 60 * 86400,
            "serial": f"{b.seed * 2654435761 % 2**64:016X}",
        },
    )


def _redis_files(b: Builder, fs: VFS) -> None:
    """redis's config and its dump file."""
    r = b.rng
    fs.add(
        "/etc/redis/redis.conf",
        "bind 127.0.0.1 ::1\nprotected-mode yes\nport 6379\ndaemonize yes\n"
        "supervised systemd\nloglevel notice\nlogfile /var/log/redis/redis-server.log\n"
        "databases 16\nsave 900 1\nsave 300 10\ndir /var/lib/redis\nmaxmemory 512mb\n"
        "maxmemory-policy allkeys-lru\n",
        owner="redis",
        group="redis",
        mode="-rw-r-----",
        mtime=b.boot - 86400 * 50,
    )
    fs.add(
        "/var/lib/redis/dump.rdb",
        mode="-rw-rw----",
        owner="redis",
        group="redis",
        binary=True,
        size=r.randrange(2_000_000, 300_000_000),
        mtime=b.now - r.randrange(60, 900),
    )


def _app_configs(b: Builder, fs: VFS, a: AppState) -> None:
    """An app's config (and the ``.orig`` an incident left beside it), its README and its TLS files."""
    r = b.rng
    fs.add(
        a.config_path,
        _config_text(a, a.config),
        mtime=a.config_mtime,
        owner="root",
        group=a.spec.user,
        mode="-rw-r-----",
    )
    orig = b.extra_files.get(a.config_path + ".orig")
    if orig:
        good = {s: dict(kv) for s, kv in a.config.items()}
        good[orig["section"]][orig["key"]] = orig["value"]
        fs.add(
            a.config_path + ".orig",
            _config_text(a, good),
            mtime=a.config_mtime - r.randrange(30, 300),
            owner="root",
            group=a.spec.user,
            mode="-rw-r-----",
        )
    fs.add(
        f"/etc/{a.name}/README",
        f"{a.name} is deployed by the platform pipeline.\nConfig changes: open a PR "
        f"against infra/config/{a.name}; hotfixes must be reverted within 24h.\n",
        mtime=a.config_mtime - 86400 * 10,
    )
    if a.tls:
        crt = a.config["tls"]["cert_file"]
        cert = b.certs[crt]
        fs.add(
            crt,
            _pem("CERTIFICATE", (b.seed, a.name), 1000 + r.randrange(0, 200)),
            mtime=cert["not_before"] + 120,
        )
        fs.add(
            a.config["tls"]["key_file"],
            _pem("PRIVATE KEY", (b.seed, a.name, "k"), 1190),
            mode="-rw-------",
            owner=a.spec.user,
            group=a.spec.user,
            mtime=cert["not_before"] + 120,
        )


def _app_units(b: Builder, fs: VFS, a: AppState) -> None:
    """An app's systemd unit file and its logrotate rule."""
    r = b.rng
    fs.add(f"/etc/systemd/system/{a.name}.service", _unit_text(b, a), mtime=a.since - r.randrange(3600, 86400 * 9))
    fs.add(
        f"/etc/logrotate.d/{a.name}",
        f"/var/log/{a.name}/*.log {{\n    daily\n    rotate 14\n    compress\n"
        "    delaycompress\n    missingok\n    notifempty\n    copytruncate\n}\n",
        mtime=b.boot - 86400 * 20,
    )


def _app_install(b: Builder, fs: VFS, a: AppState) -> None:
    """An app's install under /opt, shaped by its runtime (go, java, node, python)."""
    r = b.rng
    fs.add(f"/opt/{a.name}/VERSION", a.version + "\n", mtime=a.since - 60, owner=a.spec.user, group=a.spec.user)
    if a.spec.runtime == "go":
        fs.add(
            f"/opt/{a.name}/bin/{a.name}",
            mode="-rwxr-xr-x",
            binary=True,
            size=r.randrange(9_000_000, 40_000_000),
            mtime=a.since - 60,
        )
    elif a.spec.runtime == "java":
        fs.add(f"/opt/{a.name}/{a.name}.jar", binary=True, size=r.randrange(40_000_000, 90_000_000), mtime=a.since - 60)
    elif a.spec.runtime == "node":
        fs.add(f"/opt/{a.name}/dist/server.js", binary=True, size=r.randrange(200_000, 3_000_000), mtime=a.since - 60)
        fs.add(
            f"/opt/{a.name}/package.json",
            f'{{\n  "name": "{a.name}",\n  "version": "{a.version}",\n'
            f'  "private": true,\n  "main": "dist/server.js",\n'
            f'  "engines": {{ "node": ">=20" }}\n}}\n',
            mtime=a.since - 60,
        )
    else:
        fs.add(
            f"/opt/{a.name}/requirements.txt",
            "gunicorn==21.2.0\npsycopg[binary]==3.1.18\nredis==5.0.3\npydantic==2.6.4\n",
            mtime=a.since - 60,
        )
        fs.mkdir(f"/opt/{a.name}/venv", mtime=a.since - 60)


def _system_units(b: Builder, fs: VFS) -> None:
    """The unit files of the services that are not apps (cron, ssh, ...)."""
    for svc in b.services.values():
        if not svc.app:
            kind = "Type=oneshot\nRemainAfterExit=yes\n" if svc.oneshot else "Type=simple\n"
            restart = "" if svc.oneshot else "Restart=on-failure\n"
            fs.add(
                svc.unit_path,
                f"[Unit]\nDescription={svc.description}\n\n[Service]\n{kind}"
                f"ExecStart={svc.exec_start}\n{restart}\n[Install]\nWantedBy=multi-user.target\n",
                mtime=b.boot - 86400 * 60,
            )


def _homes(b: Builder, fs: VFS) -> None:
    """root's and every user's home: shell rc files and the bash histories the builder recorded."""
    r = b.rng
    inc = b.incident
    assert inc is not None
    fs.add("/root/.bashrc", BASHRC, mtime=b.boot - 86400 * 200)
    fs.add(
        "/root/.profile",
        '# ~/.profile: executed by Bourne-compatible login shells.\n\nif [ "$BASH" ]; then\n'
        "  if [ -f ~/.bashrc ]; then\n    . ~/.bashrc\n  fi\nfi\n\nmesg n 2> /dev/null || true\n",
        mtime=b.boot - 86400 * 200,
    )
    fs.add(
        "/root/.bash_history",
        "apt list --upgradable\nsystemctl status nginx\njournalctl -u nginx -n 50\ndf -h\nreboot\n",
        mode="-rw-------",
        mtime=b.boot - 60,
    )
    for user in [b.ops_user, *b.engineers]:
        fs.mkdir(f"/home/{user}", mode="drwxr-x---", owner=user, group=user, mtime=b.boot - 86400 * 10)
        fs.add(f"/home/{user}/.bashrc", BASHRC, owner=user, group=user, mtime=b.boot - 86400 * 100)
        hist = b.history.get(user)
        if hist:
            fs.add(
                f"/home/{user}/.bash_history",
                "\n".join(hist) + "\n",
                mode="-rw-------",
                owner=user,
                group=user,
                mtime=inc.started - r.randrange(10, 300),
            )


def _var_and_run(b: Builder, fs: VFS) -> None:
    """State beside the logs: the binary journal, apt's cache, dpkg's status, pid files, systemd's private /tmp."""
    r = b.rng
    fs.add(
        f"/var/log/journal/{_digest(b.seed, 'mid').hex()[:32]}/system.journal",
        mode="-rw-r-----",
        group="systemd-journal",
        binary=True,
        size=r.randrange(8, 64) * 1024 * 1024,
        mtime=b.now - 2,
    )
    fs.add(
        "/var/cache/apt/pkgcache.bin",
        binary=True,
        size=r.randrange(30_000_000, 60_000_000),
        mtime=b.now - r.randrange(86400, 86400 * 6),
    )
    fs.add(
        "/var/lib/dpkg/status",
        "Package: nginx\nStatus: install ok installed\nVersion: 1.18.0-6ubuntu14.4\n\n"
        "Package: openssl\nStatus: install ok installed\nVersion: 3.0.2-0ubuntu1.15\n",
        mtime=b.boot - 86400 * 5,
    )
    fs.add("/run/nginx.pid", f"{b.nginx_pids[0]}\n", mtime=b.services["nginx"].since)
    fs.add("/run/sshd.pid", f"{b.services['ssh'].pid}\n", mtime=b.services["ssh"].since)
    fs.mkdir(
        f"/tmp/systemd-private-{_digest(b.seed, 'tmp').hex()[:32]}-systemd-resolved.service-"
        f"{_digest(b.seed, 'x').hex()[:6]}",
        mode="drwx------",
        mtime=b.boot + 5,
    )


def _proc_files(b: Builder, fs: VFS) -> tuple[list[Process], int, int, tuple[float, float, float]]:
    """/proc's memory, load, uptime, version and CPU files; returns the processes, used and buffer/cache memory
    (kB) and the load averages they show, for the machine to agree with."""
    r = b.rng
    procs = _processes(b)
    rss = sum(p.rss_kb for p in procs)
    mem_used = rss + r.randrange(250_000, 600_000)
    buffcache = int((b.mem_total_kb - mem_used) * r.uniform(0.35, 0.7))
    free = b.mem_total_kb - mem_used - buffcache
    fs.add(
        "/proc/meminfo",
        f"MemTotal:       {b.mem_total_kb:>8} kB\nMemFree:        {free:>8} kB\n"
        f"MemAvailable:   {free + buffcache - 90_000:>8} kB\nBuffers:        "
        f"{buffcache // 20:>8} kB\nCached:         {buffcache - buffcache // 20:>8} kB\n"
        f"SwapCached:            0 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n",
        mode="-r--r--r--",
        mtime=b.now,
    )
    load = _load(b)
    fs.add(
        "/proc/loadavg",
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} 2/{len(procs) + 180} {b.shell_pid + 3}\n",
        mode="-r--r--r--",
        mtime=b.now,
    )
    fs.add(
        "/proc/uptime", f"{b.now - b.boot:.2f} {(b.now - b.boot) * b.ncpu * 0.93:.2f}\n", mode="-r--r--r--", mtime=b.now
    )
    fs.add(
        "/proc/version",
        f"Linux version {b.kernel} (buildd@lcy02-amd64-045) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04)"
        f" 11.4.0) #1-Ubuntu SMP\n",
        mode="-r--r--r--",
        mtime=b.now,
    )
    fs.add(
        "/proc/cpuinfo",
        "".join(
            f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) "
            f"Platinum 8259CL CPU @ 2.50GHz\ncpu MHz\t\t: 2499.998\ncpu cores\t: "
            f"{b.ncpu}\n\n"
            for i in range(b.ncpu)
        ),
        mode="-r--r--r--",
        mtime=b.now,
    )
    return procs, mem_used, buffcache, load


def _machine(
    b: Builder, fs: VFS, procs: list[Process], mem_used: int, buffcache: int, load: tuple[float, float, float]
) -> Machine:
    """The final machine: the filesystem plus the state the commands read (services, listeners, journal, ...)."""
    inc = b.incident
    assert inc is not None
    r = b.rng
    services = dict(sorted(b.services.items()))
    listeners = list(b.extra_listeners)
    for a in b.apps:
        if a.alive:
            listeners.append(
                type(listeners[0])(
                    "tcp", a.config["server"]["bind_address"], a.port, a.pid, a.comm, r.randrange(18, 40)
                )
            )
    return Machine(
        seed=b.seed,
        hostname=b.hostname,
        fqdn=f"{b.hostname}.{b.domain}",
        ip=b.ip,
        now=b.now,
        boot=b.boot,
        fs=fs,
        services=services,
        processes=procs,
        mounts=b.mounts,
        listeners=listeners,
        journal=sorted(b.journal, key=lambda e: e.ts),
        incident=inc,
        mem_total_kb=b.mem_total_kb,
        mem_used_kb=mem_used,
        mem_buffcache_kb=buffcache,
        loadavg=load,
        ncpu=b.ncpu,
        kernel=b.kernel,
        os_name="Ubuntu 22.04.4 LTS",
        ops_user=b.ops_user,
        shell_pid=b.shell_pid,
        env={
            "HOME": "/root",
            "USER": "root",
            "LOGNAME": "root",
            "SHELL": "/bin/bash",
            "HOSTNAME": b.hostname,
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color",
            "SUDO_USER": b.ops_user,
        },
        certs=b.certs,
        apps=[a.name for a in b.apps],
        login_ip=b.login_ip,
        nameserver=b.resolv_ns,
        resolver_ok=b.resolv_ns == b.resolver,
        dns={b.db_host: b.db_ip, f"{b.hostname}.{b.domain}": b.ip, **{f"{a.name}.{b.domain}": b.ip for a in b.apps}},
    )


def _load(b: Builder) -> tuple[float, float, float]:
    r = b.rng
    base = r.uniform(0.05, 0.6) * b.ncpu
    return (round(base * r.uniform(0.8, 1.3), 2), round(base, 2), round(base * r.uniform(0.8, 1.1), 2))


def _processes(b: Builder) -> list[Process]:
    r = b.rng
    procs = [
        Process("root", 1, 0, 0.0, 13_100, 167_800, "?", "Ss", b.boot, r.uniform(20, 200), "/sbin/init", "systemd")
    ]
    for i, k in enumerate(KTHREADS):
        procs.append(
            Process(
                "root",
                2 + i * (3 if i > 8 else 1),
                0 if i == 0 else 2,
                0.0,
                0,
                0,
                "?",
                "S" if i == 0 else "I<" if "gp" in k or "wq" in k else "S",
                b.boot,
                r.uniform(0, 30) if "jbd2" in k or "kswapd" in k else 0.0,
                f"[{k}]",
                k[:15],
            )
        )
    procs += b.extra_procs
    for a in b.apps:
        if a.alive:
            cpu = round(r.uniform(0.2, 6.0), 1)
            procs.append(
                Process(
                    a.spec.user,
                    a.pid,
                    1,
                    cpu,
                    a.rss_kb,
                    a.vsz_kb,
                    "?",
                    "Ssl",
                    a.since,
                    a.cpu_s,
                    b.services[a.name].exec_start,
                    a.comm,
                )
            )
    procs.append(
        Process(
            "root",
            b.shell_pid - 400 + r.randrange(0, 50),
            1,
            0.0,
            2_000,
            6_200,
            "ttyS0",
            "Ss+",
            b.boot + 9,
            0.0,
            "/sbin/agetty -o -p -- \\u --keep-baud 115200,57600,38400,9600 ttyS0 vt220",
            "agetty",
        )
    )
    return sorted(procs, key=lambda p: p.pid)


def _app_logs(b: Builder, fs: VFS) -> None:
    """Each app's log in its runtime's format, and the huge (lazy) logs an incident grew."""
    for a in b.apps:
        fs.mkdir(f"/var/log/{a.name}", owner=a.spec.user, group="adm", mode="drwxr-x---")
        lines = [
            C.log_line(a.spec.runtime, ts, lvl, msg, pid=pid, logger=_logger(a, msg), extra=_extra(a, x))
            for ts, lvl, msg, x, pid in sorted(a.events, key=lambda e: e[0])
        ]
        last = max((e[0] for e in a.events), default=a.since * 1000) // 1000
        fs.add(a.log_path, "\n".join(lines) + "\n", owner=a.spec.user, group="adm", mode="-rw-r-----", mtime=last)
    incident = b.incident
    assert incident is not None, "logs are rendered after the incident is planted"
    for path, lazy in b.lazy_files.items():
        a = next(x for x in b.apps if path.startswith(f"/var/log/{x.name}/"))
        fs.add(path, lazy=lazy, owner=a.spec.user, group="adm", mode="-rw-r-----", mtime=incident.started)


def _system_logs(b: Builder, fs: VFS) -> None:
    """syslog and kern.log from the journal (with the firewall's kernel lines added to it first), auth.log, dpkg.log."""
    r = b.rng
    host = b.hostname
    incident = b.incident
    assert incident is not None, "logs are rendered after the incident is planted"
    syslog_until = incident.started + 29 if incident.kind == "disk_full" else b.now + 1
    ufw = [
        (
            t,
            f"[UFW BLOCK] IN=ens5 OUT= MAC=0e:{r.randrange(256):02x}:4c:{r.randrange(256):02x}:9a:11 "
            f"SRC={r.randrange(30, 220)}.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(1, 255)} DST={b.ip} "
            f"LEN=44 TOS=0x00 PREC=0x00 TTL=2{r.randrange(30, 50)} ID={r.randrange(65536)} PROTO=TCP "
            f"SPT={r.randrange(1024, 65535)} DPT={r.choice((23, 3389, 5900, 8443, 6379, 2375))} WINDOW=1024 "
            f"RES=0x00 SYN URGP=0",
        )
        for t in b.times(r.randrange(3, 8), b.window, b.now)
    ]
    for t, m in ufw:
        b.jlog(t, "kernel", None, m, prio=4)
    entries = sorted(b.journal, key=lambda e: e.ts)

    def fmt(e: JournalEntry) -> str:
        if e.kernel:
            return f"{syslog_ts(e.ts)} {host} kernel: [{e.ts - b.boot:12.6f}] {e.message}"
        tag = f"{e.ident}[{e.pid}]" if e.pid is not None else e.ident
        return f"{syslog_ts(e.ts)} {host} {tag}: {e.message}"

    day_start = b.now - b.now % 86400 - 3600 * 0
    since = min(b.window, day_start)
    syslog = [fmt(e) for e in entries if since <= e.ts < syslog_until]
    fs.add(
        "/var/log/syslog",
        "\n".join(syslog) + "\n",
        owner="syslog",
        group="adm",
        mode="-rw-r-----",
        mtime=int(min(syslog_until, b.now - 1)),
    )
    kern = [fmt(e) for e in entries if e.kernel and e.ts >= since and e.ts < syslog_until]
    fs.add(
        "/var/log/kern.log",
        "\n".join(kern) + ("\n" if kern else ""),
        owner="syslog",
        group="adm",
        mode="-rw-r-----",
        mtime=int(max([e.ts for e in entries if e.kernel] + [b.boot])),
    )
    auth = sorted(b.auth, key=lambda x: x[0])
    fs.add(
        "/var/log/auth.log",
        "".join(f"{syslog_ts(t)} {host} {ident}{f'[{pid}]' if pid else ''}: {m}\n" for t, ident, pid, m in auth),
        owner="syslog",
        group="adm",
        mode="-rw-r-----",
        mtime=int(auth[-1][0]),
    )
    fs.add(
        "/var/log/dpkg.log",
        f"{_dpkg_ts(b.boot - 86400 * 5)} startup archives unpack\n"
        f"{_dpkg_ts(b.boot - 86400 * 5 + 4)} upgrade openssl:amd64 3.0.2-0ubuntu1.14 "
        f"3.0.2-0ubuntu1.15\n{_dpkg_ts(b.boot - 86400 * 5 + 9)} status installed "
        f"openssl:amd64 3.0.2-0ubuntu1.15\n",
        mtime=b.boot - 86400 * 5 + 9,
    )


def _nginx_logs(b: Builder, fs: VFS) -> None:
    """nginx's access log (every request the builder made) and its error log."""
    r = b.rng
    fs.mkdir("/var/log/nginx", owner="root", group="adm", mode="drwxr-xr-x")
    reqs = sorted(b.requests, key=lambda q: q.ts)
    fs.add(
        "/var/log/nginx/access.log",
        "".join(
            f'{q.client} - - [{clf_ts(q.ts)}] "{q.method} {q.path} HTTP/1.1" {q.status} {q.size} "-" "{q.agent}"\n'
            for q in reqs
        ),
        owner="www-data",
        group="adm",
        mode="-rw-r-----",
        mtime=int(reqs[-1].ts) if reqs else b.now,
    )
    errs = sorted(b.nginx_errors)
    if not errs:
        wpid = b.nginx_pids[-1]
        errs = [(b.window + r.randrange(60, 3600), f"[notice] {wpid}#{wpid}: signal process started")]
    fs.add(
        "/var/log/nginx/error.log",
        "".join(f"{nginx_error_ts(t)} {m}\n" for t, m in errs),
        owner="www-data",
        group="adm",
        mode="-rw-r-----",
        mtime=int(errs[-1][0]),
    )


def _redis_log(b: Builder, fs: VFS) -> None:
    """redis's log: its background saves."""
    r = b.rng
    rp = b.services["redis-server"].pid
    assert rp is not None, "redis-server runs on a healthy machine"
    fs.add(
        "/var/log/redis/redis-server.log",
        "".join(
            f"{rp}:M {_redis_ts(t)} * 10 changes in 300 seconds. Saving...\n{rp}:M {_redis_ts(t)} * "
            f"Background saving started by pid {rp + 1 + i}\n{rp}:M {_redis_ts(t + 1)} * Background saving "
            f"terminated with success\n"
            for i, t in enumerate(b.times(r.randrange(3, 7), b.window, b.now))
        ),
        owner="redis",
        group="adm",
        mode="-rw-r-----",
        mtime=b.now - r.randrange(30, 600),
    )


def _dpkg_ts(ts: float) -> str:
    from .timefmt import utc

    return f"{utc(ts):%Y-%m-%d %H:%M:%S}"


def _redis_ts(ts: float) -> str:
    from .timefmt import MONTHS, utc

    d = utc(ts)
    return f"{d.day:02d} {MONTHS[d.month - 1]} {d.year} {d:%H:%M:%S}.{int(ts * 1000) % 1000:03d}"


def _logger(a: AppState, msg: str) -> str:
    part = (
        "db.Pool"
        if "pool" in msg or "postgres" in msg or "database" in msg
        else "tls.CertWatcher"
        if "TLS" in msg or "certificate" in msg
        else "http.AccessLog"
        if msg[:4] in ("GET ", "POST", "PUT ") or msg.startswith("slow request")
        else "main"
    )
    if a.spec.runtime == "java":
        return C.java_logger(a.spec, part)
    return C.python_logger(a.spec, part.split(".")[0].lower())


def _extra(a: AppState, x: dict[str, Any] | None) -> dict[str, Any] | None:
    if a.spec.runtime == "java":
        return x or {"thread": "main"}
    if a.spec.runtime == "go":
        return {"svc": a.name}
    if a.spec.runtime == "node":
        return {"svc": a.name}
    return None


def _dir_mtimes(fs: VFS, path: str) -> int:
    node = fs.get(path)
    if isinstance(node, File):
        return node.mtime
    assert isinstance(node, Dir)
    latest = node.mtime
    for c in node.children:
        latest = max(latest, _dir_mtimes(fs, join(path, c)))
    if path not in ("/proc",):
        node.mtime = latest
    return latest
