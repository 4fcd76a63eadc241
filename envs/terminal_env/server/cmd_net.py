"""Network views of the machine: ss, openssl x509, curl (loopback only), dig/nslookup/host/getent.

No packet ever leaves the process: answers come from the machine model (listeners, services, the incident,
``/etc/hosts``, ``/etc/resolv.conf`` and the names the site's DNS knows).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Generator, Iterator
from urllib.parse import urlsplit

from .opts import OptError, digits, getopt
from .shell import IO, Refused, Shell
from .timefmt import date_cmd, openssl_ts
from .vfs import Dir, File

Out = Generator[str, None, int]
_PORT_NAMES = {22: "ssh", 53: "domain", 80: "http", 443: "https", 6379: "redis", 5432: "postgresql"}


def ss(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    flags = set()
    for a in argv[1:]:
        if a.startswith("--"):
            name = {
                "--tcp": "t",
                "--udp": "u",
                "--listening": "l",
                "--numeric": "n",
                "--processes": "p",
                "--all": "a",
            }.get(a)
            if name is None:
                io.err(f"ss: unrecognized option '{a}'\nUsage: ss [ OPTIONS ]\n       ss [ OPTIONS ] [ FILTER ]\n")
                return 255
            flags.add(name)
        elif a.startswith("-"):
            for ch in a[1:]:
                if ch not in "tulnpa46eHsoixw":
                    io.err(f"ss: invalid option -- '{ch}'\nUsage: ss [ OPTIONS ]\n       ss [ OPTIONS ] [ FILTER ]\n")
                    return 255
                flags.add(ch)
        else:
            raise Refused("ss filter expressions are not supported by this sandbox's ss")
    m = sh.m
    tcp, udp = "t" in flags, "u" in flags
    if not tcp and not udp:
        tcp = True
    numeric = "n" in flags
    rows = []
    listening = "l" in flags or "a" in flags
    established = "l" not in flags
    for ls in m.listeners:
        if (ls.proto == "tcp" and not tcp) or (ls.proto == "udp" and not udp) or not listening:
            continue
        port = str(ls.port) if numeric else _PORT_NAMES.get(ls.port, str(ls.port))
        addr = ls.addr if ls.addr not in ("0.0.0.0",) or numeric else "0.0.0.0"
        procs = ""
        if "p" in flags:
            owners = [(ls.comm, ls.pid)]
            if ls.comm == "nginx":
                owners += [(p.comm, p.pid) for p in m.processes if p.comm == "nginx" and p.pid != ls.pid]
            procs = "users:(" + ",".join(f'("{c}",pid={p},fd={ls.fd})' for c, p in owners) + ")"
        state = "LISTEN" if ls.proto == "tcp" else "UNCONN"
        backlog = "511" if ls.comm == "nginx" else "4096" if ls.comm.startswith("systemd") else "128"
        rows.append((ls.proto, state, "0", backlog if ls.proto == "tcp" else "0", f"{addr}:{port}", "0.0.0.0:*", procs))
    if established and tcp:
        sport = 22 if numeric else "ssh"
        peer_port = 40000 + int(hashlib.sha256(m.login_ip.encode()).hexdigest()[:4], 16) % 20000
        sshd = next((p.pid for p in m.processes if p.comm == "sshd" and p.cmd.endswith("[priv]")), 0)
        procs = f'users:(("sshd",pid={sshd},fd=4))' if "p" in flags else ""
        rows.append(("tcp", "ESTAB", "0", "0", f"{m.ip}:{sport}", f"{m.login_ip}:{peer_port}", procs))
    netid = tcp and udp
    heads = ("Netid", "State", "Recv-Q", "Send-Q", "Local Address:Port", "Peer Address:Port", "Process")
    w = [max(len(heads[j]), *(len(r[j]) for r in rows)) if rows else len(heads[j]) for j in range(7)]

    def fmt(r: tuple[str, ...]) -> str:
        cells = ([f"{r[0]:<{w[0]}}"] if netid else []) + [
            f"{r[1]:<{w[1]}}",
            f"{r[2]:<{w[2]}}",
            f"{r[3]:<{w[3]}}",
            f"{r[4]:>{w[4]}}",
            f"{r[5]:<{w[5]}}",
            r[6],
        ]
        return " ".join(cells).rstrip() + "\n"

    yield fmt(heads)
    for r in rows:
        yield fmt(r)
    return 0


def openssl(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    if len(argv) < 2:
        raise Refused("interactive `openssl` is not supported; use e.g. `openssl x509 -in FILE -noout -enddate`")
    sub = argv[1]
    if sub == "version":
        yield "OpenSSL 3.0.2 15 Mar 2022 (Library: OpenSSL 3.0.2 15 Mar 2022)\n"
        return 0
    if sub in (
        "s_client",
        "s_server",
        "req",
        "genrsa",
        "genpkey",
        "ca",
        "enc",
        "rand",
        "dgst",
        "pkcs12",
        "rsa",
        "verify",
        "crl",
        "ocsp",
        "speed",
    ):
        raise Refused(f"`openssl {sub}` is not supported in this sandbox (only `openssl x509` and `openssl version`)")
    if sub != "x509":
        io.err(f"Invalid command '{sub}'; type \"help\" for a list.\n")
        return 1
    args = argv[2:]
    infile = None
    outputs: list[str] = []
    checkend = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-in",):
            if i + 1 >= len(args):
                io.err("x509: Option -in needs a value\nx509: Use -help for summary.\n")
                return 1
            infile = args[i + 1]
            i += 2
            continue
        if a == "-checkend":
            if i + 1 >= len(args) or not digits(args[i + 1]):
                io.err(
                    'x509: Invalid number "' + (args[i + 1] if i + 1 < len(args) else "") + '" for option '
                    "-checkend\nx509: Use -help for summary.\n"
                )
                return 1
            checkend = int(args[i + 1])
            i += 2
            continue
        if a in ("-noout", "-nocert"):
            outputs.append("noout")
        elif a in ("-enddate", "-startdate", "-dates", "-subject", "-issuer", "-serial", "-text", "-fingerprint"):
            outputs.append(a[1:])
        elif a in ("-inform", "-outform", "-nameopt", "-certopt"):
            i += 1
        else:
            io.err(f"x509: Unknown option or message digest: {a.lstrip('-')}\nx509: Use -help for summary.\n")
            return 1
        i += 1
    if infile is None:
        raise Refused("openssl x509 reading from standard input is not supported; pass -in FILE")
    path, node, _errno = sh.lookup(infile)
    if node is None or isinstance(node, Dir):
        io.err(
            f"Could not open file or uri for loading certificate from {infile}\n"
            f"{sh.next_pid()}:error:8000000{2 if node is None else 15}:system library:file_open:"
            f"{'No such file or directory' if node is None else 'Is a directory'}:"
            f"../providers/implementations/storemgmt/file_store.c:267:calling stat({infile})\nUnable to load "
            f"certificate\n"
        )
        return 1
    cert = sh.m.certs.get(path)
    if cert is None or not isinstance(node, File) or "CERTIFICATE" not in (node.text or ""):
        io.err(f"Could not read certificate from {infile}\nUnable to load certificate\n")
        return 1
    nb, na, serial = cert["not_before"], cert["not_after"], cert["serial"]
    for o in outputs:
        if o == "enddate":
            yield f"notAfter={openssl_ts(na)}\n"
        elif o == "startdate":
            yield f"notBefore={openssl_ts(nb)}\n"
        elif o == "dates":
            yield f"notBefore={openssl_ts(nb)}\nnotAfter={openssl_ts(na)}\n"
        elif o == "subject":
            yield f"subject={cert['subject']}\n"
        elif o == "issuer":
            yield f"issuer={cert['issuer']}\n"
        elif o == "serial":
            yield f"serial={serial}\n"
        elif o == "fingerprint":
            fp = hashlib.sha1(serial.encode()).hexdigest().upper()
            yield "SHA1 Fingerprint=" + ":".join(fp[k : k + 2] for k in range(0, 40, 2)) + "\n"
        elif o == "text":
            yield (
                "Certificate:\n    Data:\n        Version: 3 (0x2)\n        Serial Number:\n            "
                + ":".join(serial[k : k + 2].lower() for k in range(0, len(serial), 2))
                + "\n"
                "        Signature Algorithm: sha256WithRSAEncryption\n"
                f"        Issuer: {cert['issuer']}\n        Validity\n"
                f"            Not Before: {openssl_ts(nb)}\n            Not After : {openssl_ts(na)}\n"
                f"        Subject: {cert['subject']}\n        Subject Public Key Info:\n"
                "            Public Key Algorithm: rsaEncryption\n                Public-Key: (2048 bit)\n"
            )
    if checkend is not None:
        expires = na <= sh.now + checkend
        yield "Certificate will expire\n" if expires else "Certificate will not expire\n"
        return 1 if expires else 0
    if "noout" not in outputs:
        yield node.text or ""
    return 0


# -- name resolution -----------------------------------------------------------------------------------------
def _hosts(sh: Shell) -> dict[str, str]:
    node = sh.m.fs.get("/etc/hosts")
    out: dict[str, str] = {}
    for line in (node.text or "").splitlines() if isinstance(node, File) else []:
        parts = line.split("#", 1)[0].split()
        for name in parts[1:]:
            out.setdefault(name, parts[0])
    return out


def _dns(sh: Shell, name: str) -> str | None:
    """What the site's DNS answers for ``name`` (None: NXDOMAIN)."""
    name = name.rstrip(".")
    m = sh.m
    if name in m.dns:
        return m.dns[name]
    domain = m.fqdn.split(".", 1)[1]
    if "." not in name:
        return m.dns.get(f"{name}.{domain}")
    if name.endswith(("." + domain, ".internal", ".local")):
        return None
    h = hashlib.sha256(name.encode()).digest()
    return f"{h[0] % 200 + 20}.{h[1]}.{h[2]}.{h[3] % 250 + 2}"


def getent(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    if len(argv) < 2:
        io.err(
            "Usage: getent [OPTION...] database [key ...]\nTry `getent --help' or `getent --usage' for more "
            "information.\n"
        )
        return 1
    db, keys = argv[1], argv[2:]
    if db == "passwd" or db == "group":
        node = sh.m.fs.get("/etc/passwd")
        lines = (node.text or "").splitlines() if isinstance(node, File) else []
        if db == "group":
            lines = [f"{ln.split(':')[0]}:x:{ln.split(':')[3]}:" for ln in lines]
        hit = False
        for ln in lines:
            if not keys or ln.split(":")[0] in keys:
                hit = True
                yield ln + "\n"
        return 0 if hit or not keys else 2
    if db not in ("hosts", "ahosts", "ahostsv4"):
        io.err(f"Unknown database: {db}\n")
        return 1
    if not keys:
        node = sh.m.fs.get("/etc/hosts")
        for line in (node.text or "").splitlines() if isinstance(node, File) else []:
            parts = line.split("#", 1)[0].split()
            if parts:
                yield f"{parts[0]:<15} {' '.join(parts[1:])}\n"
        return 0
    status = 0
    for k in keys:
        ip = _hosts(sh).get(k)
        if ip is None:
            if not sh.m.resolver_ok:
                status = 2
                continue
            ip = _dns(sh, k)
        if ip is None:
            status = 2
            continue
        yield f"{ip:<15} {k}\n"
    return status


def _dig_fail(sh: Shell, name: str, short: bool) -> Iterator[str]:
    ns = sh.m.nameserver
    for _ in range(3):
        yield f";; communications error to {ns}#53: timed out\n"
    if not short:
        yield f"\n; <<>> DiG 9.18.18-0ubuntu0.22.04.2-Ubuntu <<>> {name}\n;; global options: +cmd\n"
    yield ";; no servers could be reached\n"
    if not short:
        yield "\n"


def dig(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    args = argv[1:]
    short = "+short" in args
    names = [
        a
        for a in args
        if not a.startswith("+")
        and not a.startswith("@")
        and not a.startswith("-")
        and a.upper() not in ("A", "AAAA", "MX", "NS", "TXT", "IN", "CNAME", "ANY", "PTR", "SOA")
    ]
    if any(a.startswith("@") for a in args):
        raise Refused("querying a chosen DNS server (@server) is not supported in this sandbox")
    name = names[0] if names else "."
    if not sh.m.resolver_ok:
        yield from _dig_fail(sh, name, short)
        return 9
    ip = _dns(sh, name) if name != "." else None
    fq = name.rstrip(".") + "."
    qid = int(hashlib.sha256(f"{sh.m.seed}{name}{sh.ncommands}".encode()).hexdigest()[:4], 16)
    if short:
        if ip:
            yield ip + "\n"
        return 0
    status = "NOERROR" if ip else "NXDOMAIN"
    out = [
        f"\n; <<>> DiG 9.18.18-0ubuntu0.22.04.2-Ubuntu <<>> {name}\n;; global options: +cmd\n;; Got answer:\n",
        f";; ->>HEADER<<- opcode: QUERY, status: {status}, id: {qid}\n",
        f";; flags: qr rd ra; QUERY: 1, ANSWER: {1 if ip else 0}, AUTHORITY: {0 if ip else 1}, ADDITIONAL: 1\n\n",
        ";; OPT PSEUDOSECTION:\n; EDNS: version: 0, flags:; udp: 65494\n;; QUESTION SECTION:\n",
        f";{fq}\t\t\tIN\tA\n\n",
    ]
    if ip:
        out.append(f";; ANSWER SECTION:\n{fq}\t\t60\tIN\tA\t{ip}\n\n")
    out.append(
        f";; Query time: {qid % 40 + 1} msec\n;; SERVER: 127.0.0.53#53(127.0.0.53) (UDP)\n"
        f";; WHEN: {date_cmd(sh.now)}\n;; MSG SIZE  rcvd: {len(fq) + (45 if ip else 104)}\n\n"
    )
    yield from out
    return 0


def nslookup(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    names = [a for a in argv[1:] if not a.startswith("-")]
    if not names:
        raise Refused("interactive nslookup is not supported; pass a name")
    name = names[0]
    if not sh.m.resolver_ok:
        yield ";; connection timed out; no servers could be reached\n\n"
        return 1
    ip = _dns(sh, name)
    yield "Server:\t\t127.0.0.53\nAddress:\t127.0.0.53#53\n\n"
    if ip is None:
        yield f"** server can't find {name}: NXDOMAIN\n\n"
        return 1
    yield f"Non-authoritative answer:\nName:\t{name}\nAddress: {ip}\n\n"
    return 0


def host(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    names = [a for a in argv[1:] if not a.startswith("-")]
    if not names:
        io.err(
            "Usage: host [-aCdilrTvVw] [-c class] [-N ndots] [-t type] [-W time]\n            [-R number] "
            "[-m flag] [-p port] hostname [server]\n"
        )
        return 1
    if not sh.m.resolver_ok:
        yield ";; communications error to 127.0.0.53#53: timed out\n" * 2
        yield ";; no servers could be reached\n"
        return 1
    ip = _dns(sh, names[0])
    if ip is None:
        yield f"Host {names[0]} not found: 3(NXDOMAIN)\n"
        return 1
    yield f"{names[0]} has address {ip}\n"
    return 0


# -- curl ------------------------------------------------------------------------------------------------------
_NGINX_ERR = (
    "<html>\r\n<head><title>{code} {text}</title></head>\r\n<body>\r\n<center><h1>{code} {text}</h1>"
    "</center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
)
_REASON = {
    200: "OK",
    404: "Not Found",
    502: "Bad Gateway",
    503: "Service Temporarily Unavailable",
    504: "Gateway Time-out",
    500: "Internal Server Error",
}


def _app_reply(sh: Shell, app: str, path: str) -> tuple[int, str] | str:
    """(status, body) of a request served by ``app``, or a curl error string."""
    inc = sh.m.incident
    if inc.service == app:
        if inc.kind == "db_pool_exhausted" and not path.startswith(("/health", "/metrics")):
            return "curl: (28) Operation timed out after 30001 milliseconds with 0 bytes received"
        if inc.kind == "dns_misconfig" and not path.startswith(("/metrics",)):
            return 503, '{"error":"database unavailable"}'
    if path.startswith("/health"):
        return 200, '{"status":"ok"}'
    if path.startswith("/metrics"):
        rss = sh.m.services[app].memory_kb * 1024
        return 200, (
            f"# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
            f"process_resident_memory_bytes {rss}\n"
        )
    return 404, '{"error":"not found"}'


def curl(sh: Shell, io: IO, argv: list[str], stdin: Iterator[str] | None) -> Out:
    try:
        opts, ops = getopt(
            "curl",
            argv[1:],
            flags="sSiIkvLfq",
            valued="mXHdo",
            longs={
                "silent": False,
                "show-error": False,
                "include": False,
                "head": False,
                "insecure": False,
                "max-time": True,
                "request": True,
                "header": True,
                "data": True,
                "output": True,
                "fail": False,
                "location": False,
                "connect-timeout": True,
            },
        )
    except OptError as e:
        io.err(str(e).replace("Try 'curl --help'", "curl: try 'curl --help' or 'curl --manual'"))
        return 2
    flags = {o for o, _ in opts}
    if flags & {"-o", "--output"}:
        raise Refused("curl -o writes a file; this triage sandbox is read-only")
    if not ops:
        io.err("curl: try 'curl --help' or 'curl --manual' for more information\n")
        return 2
    url = ops[0] if "://" in ops[0] else "http://" + ops[0]
    try:
        parts = urlsplit(url)
        hostn = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        io.err("curl: (3) URL using bad/illegal format or missing URL\n")
        return 3
    path = parts.path or "/"
    scheme = parts.scheme
    if scheme not in ("http", "https") or not hostn:
        io.err(
            f'curl: (1) Protocol "{scheme}" not supported\n'
            if hostn
            else "curl: (3) URL using bad/illegal format or missing URL\n"
        )
        return 1 if hostn else 3
    m = sh.m
    local = hostn in ("localhost", "127.0.0.1", m.hostname, m.fqdn, m.ip, "0.0.0.0")
    silent = bool(flags & {"-s", "--silent"}) and not flags & {"-S", "--show-error"}
    if not local:
        if not m.resolver_ok and not re.fullmatch(r"[\d.]+", hostn):
            if not silent:
                io.err(f"curl: (6) Could not resolve host: {hostn}\n")
            return 6
        raise Refused(f"this sandbox has no network access beyond the machine itself (curl {hostn})")
    listener = next((ls for ls in m.listeners if ls.port == port and ls.proto == "tcp"), None)
    if listener is None:
        if not silent:
            io.err(f"curl: (7) Failed to connect to {hostn} port {port} after 0 ms: Connection refused\n")
        return 7
    app = next((a for a in m.apps if m.services[a].port == port and m.services[a].pid == listener.pid), None)
    cert_app = next((a for a in m.apps if m.services[a].port == port), None)
    tls_cert = f"/etc/{cert_app}/tls/{cert_app}.crt" if cert_app else None
    if scheme == "https" and port != 443:
        if tls_cert not in m.certs:
            if not silent:
                io.err("curl: (35) error:0A00010B:SSL routines::wrong version number\n")
            return 35
        if m.certs[tls_cert]["not_after"] <= sh.now and not flags & {"-k", "--insecure"}:
            if not silent:
                io.err(
                    "curl: (60) SSL certificate problem: certificate has expired\nMore details here: "
                    "https://curl.se/docs/sslcerts.html\n\ncurl failed to verify the legitimacy of the server and "
                    "therefore could not\nestablish a secure connection to it. To learn more about this situation "
                    "and\nhow to fix it, please visit the web page mentioned above.\n"
                )
            return 60
    elif scheme == "http" and tls_cert in m.certs and app is not None:
        return (yield from _http_out(flags, 400, "Client sent an HTTP request to an HTTPS server.\n"))
    if listener.comm in ("python3",) and app is None:
        body = (
            '<!DOCTYPE HTML>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Directory listing '
            'for /</title>\n</head>\n<body>\n<h1>Directory listing for /</h1>\n<hr>\n<ul>\n<li><a href="'
            '.bashrc">.bashrc</a></li>\n</ul>\n<hr>\n</body>\n</html>\n'
        )
        return (
            yield from _http_out(
                flags,
                200 if path == "/" else 404,
                body
                if path == "/"
                else "<!DOCTYPE HTML>\n<html><body><h1>Error response</h1><p>Error code: 404</p>"
                "<p>Message: File not found.</p></body></html>\n",
                server="SimpleHTTP/0.6 Python/3.10.12",
            )
        )
    if listener.comm == "node" and app is None:
        return (yield from _http_out(flags, 200, '{"proxy":"debug","upstream":null}\n'))
    if app is not None:
        reply = _app_reply(sh, app, path)
        if isinstance(reply, str):
            if not silent:
                io.err(reply + "\n")
            return 28
        return (yield from _http_out(flags, reply[0], reply[1] + "\n"))
    if listener.comm == "nginx":
        if path == "/healthz":
            return (yield from _http_out(flags, 200, "ok", server="nginx"))
        target = next((a for a in m.apps if path.startswith(f"/api/{_resource(sh, a)}")), None)
        if target is None:
            return (yield from _http_out(flags, 404, _NGINX_ERR.format(code=404, text="Not Found"), server="nginx"))
        svc = m.services[target]
        inc = m.incident
        if svc.active != "active" or (inc.service == target and inc.kind == "cert_expired"):
            return (yield from _http_out(flags, 502, _NGINX_ERR.format(code=502, text="Bad Gateway"), server="nginx"))
        reply = _app_reply(sh, target, path[len("/api/" + _resource(sh, target)) :] or "/")
        if isinstance(reply, str):
            return (
                yield from _http_out(flags, 504, _NGINX_ERR.format(code=504, text="Gateway Time-out"), server="nginx")
            )
        return (yield from _http_out(flags, reply[0], reply[1] + "\n", server="nginx"))
    if not silent:
        io.err("curl: (52) Empty reply from server\n")
    return 52


def _resource(sh: Shell, app: str) -> str:
    from .catalog import APPS

    return next(a.resource for a in APPS if a.name == app)


def _http_out(flags: set[str], status: int, body: str, server: str | None = None) -> Out:
    head = flags & {"-I", "--head"}
    if head or flags & {"-i", "--include"}:
        yield f"HTTP/1.1 {status} {_REASON.get(status, '')}\r\n"
        if server:
            yield f"Server: {server}\r\n"
        ctype = "application/json" if body.startswith("{") else "text/html"
        yield f"Content-Type: {ctype}\r\nContent-Length: {len(body.encode())}\r\nConnection: keep-alive\r\n\r\n"
    if not head:
        yield body
    if status >= 400 and flags & {"-f", "--fail"}:
        return 22
    return 0
