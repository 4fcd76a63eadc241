"""The bash the shell env runs in each container: the root supervisor and the agent's per-command line.

Two processes of ours live in every sandbox container:

* the **supervisor** (the container's main process, root with only ``ROOT_CAPABILITIES``, under Docker's init): it
  reads one request per line on its stdin and answers one line on its stdout, using bash builtins only, so it still
  works when the agent's fork bomb holds every pid of the container. ``kill`` SIGKILLs every other process (the
  agent's shell, its children, anything it left behind) until none is left and answers how many remain; ``status
  PID`` answers the cgroup's OOM kills and the forks it refused at its pids limit so far, and the processes the
  agent left running besides its shell ``PID``; ``reward`` answers the verifier's reward file (``_read_reward``).
* the agent's **shell**: one ``bash --noprofile --norc`` per episode (a new one after a kill or an ``exit``) as the
  unprivileged ``AGENT_UID``, under the ``driver`` (which owns its pipes). ``SHELL_INIT`` defines the harness's
  end-of-step function; each step is one ``command_line``: the agent's command run with ``eval`` (so ``cd``,
  variables and functions persist between steps, as in a terminal) with stdin from /dev/null and the control
  descriptor closed, then that function, which writes the end report on the control descriptor only. Nothing of
  the harness ever goes to the command's stdout or stderr, and the report carries no secret: the channel is
  what keeps it apart.
"""

from __future__ import annotations

from .tasks import CONTAINER_REWARD_JSON, CONTAINER_REWARD_TXT

AGENT_UID = 1000
"""Unprivileged uid (and gid) of the agent's shell; it holds no capabilities."""
KILL_WAIT_S = 10
"""How long the supervisor's ``kill`` keeps killing until no other process is left: 200 quick rounds (which outpace a
fork bomb), then rounds 20 ms apart until this many seconds have passed. A killed process still has to run its
exit: one holding 440 MB outlived 200 quick rounds every time, and on a loaded machine ordinary ones did too (the
verifier then refused to run the tests, and a solved task scored 0)."""

SUPERVISOR = r"""
log() { printf 'openenv-echo sandbox: %s\n' "$*" >&2; }
count_others() {  # live processes other than init, the supervisor and $1 (zombies do not count)
  n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [[ $p == 1 || $p == "$$" || $p == "$1" ]] && continue
    read -r s < "$d/stat" 2>/dev/null || continue
    s=${s##*) }
    [[ ${s%% *} == Z ]] || n=$((n + 1))
  done
}
# the verifier's and the agent's log mounts get their owners and modes whatever the image's directories had (Docker
# copies those onto a tmpfs); the verifier's starts empty
chown 0:0 /logs/verifier /tests && chmod 0755 /logs/verifier /tests && chown AGENT_UID:AGENT_UID /logs/agent \
  && chmod 0755 /logs/agent || { log "cannot set up /logs"; exit 1; }
for f in /logs/verifier/* /logs/verifier/.[!.]*; do [[ -e $f || -L $f ]] && rm -rf -- "$f"; done
exec {nap}<> <(:)  # a pipe only we hold: `read -t S -u $nap` sleeps S seconds without a fork (none may be left)
now_us() { now=${EPOCHREALTIME//[!0-9]/}; }
log "ready"
while IFS= read -r req; do
  set -- $req
  case "$1" in
    kill)
      # until none is left: 200 quick rounds first (they outpace a fork bomb), then rounds 20 ms apart for up to
      # KILL_WAIT_S seconds (a killed process still has to run its exit, which for a big one or on a loaded machine
      # takes a while; the pauses leave it the CPU)
      now_us; end=$((now + KILL_WAIT_S * 1000000)) i=0
      while :; do
        kill -9 -1 2>/dev/null
        count_others
        ((n == 0)) && break
        ((++i < 200)) && continue
        now_us; ((now < end)) || break
        read -rt 0.02 -u "$nap" _
      done
      log "stopped every other process (${2:-request})"
      printf 'killed %d\n' "$n";;
    status)
      # status SHELL_PID -> "status OOM_KILLS FORKS_REFUSED pid:name ...": the cgroup's OOM kills and forks refused
      # at its pids limit so far, and the agent's processes other than its shell whose parent is that shell or
      # init (what it left running; their own children are not listed)
      out=""
      for d in /proc/[0-9]*; do
        p=${d#/proc/}
        [[ $p == "$2" || $p == "$$" || $p == 1 ]] && continue
        read -r s < "$d/stat" 2>/dev/null || continue
        s=${s##*) }
        state=${s%% *} s=${s#* }
        [[ $state == Z ]] && continue
        [[ ${s%% *} == 1 || ${s%% *} == "$2" ]] || continue  # (the driver and other execs have parent 0)
        uid=""
        while read -r k v _; do [[ $k == Uid: ]] && { uid=$v; break; }; done < "$d/status" 2>/dev/null
        [[ $uid == AGENT_UID ]] || continue
        read -r comm < "$d/comm" 2>/dev/null
        out+=" $p:${comm// /_}"
      done
      oom=0 refused=0
      for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
        [[ -r $f ]] || continue
        while read -r k v; do [[ $k == oom_kill ]] && oom=$v; done < "$f"
      done
      for f in /sys/fs/cgroup/pids.events /sys/fs/cgroup/pids/pids.events; do
        [[ -r $f ]] || continue
        while read -r k v; do [[ $k == max ]] && refused=$v; done < "$f"
      done
      printf 'status %s %s%s\n' "$oom" "$refused" "$out";;
    reward)
      # reward -> "none", "bad PATH" (a link or not a regular file: no fallback) or "ok PATH BODY" (its first 4096
      # characters, line breaks and tabs as spaces): the verifier's reward, read here and not by an exec, whose
      # output the engine can lose under load (an exec that printed it once came back empty, exit status 0)
      ans=none
      for f in REWARD_TXT REWARD_JSON; do
        if [[ -L $f ]] || { [[ -e $f ]] && [[ ! -f $f ]]; }; then
          ans="bad $f"; break
        elif [[ -f $f ]]; then
          body=""; IFS= read -r -d '' -n 4096 body < "$f"
          ans="ok $f ${body//[$'\n\r\t']/ }"; break
        fi
      done
      printf '%s\n' "$ans";;
    fill)
      # fill BYTES DIR: the next BYTES bytes of our input are a tar (one top directory, stripped), unpacked into DIR
      # as the agent's uid. Done here, not by an exec through the engine (one costs ~80 ms under load: a reset of a
      # generated instance waits on it); head reads exactly BYTES, and the rest is drained whatever tar does, so the
      # next request starts where it should
      err=$(head -c "$2" | { setpriv --reuid=AGENT_UID --regid=AGENT_UID --clear-groups -- \
        tar -x -m -C "${req#* * }" --strip-components=1 2>&1; s=$?; cat >/dev/null; exit "$s"; })
      printf 'filled %d %s\n' "$?" "${err//[$'\n\r\t']/ }";;
    *) printf 'error unknown request\n';;
  esac
done
""".replace("AGENT_UID", str(AGENT_UID)).replace("KILL_WAIT_S", str(KILL_WAIT_S))
SUPERVISOR = SUPERVISOR.replace("REWARD_TXT", CONTAINER_REWARD_TXT).replace("REWARD_JSON", CONTAINER_REWARD_JSON)


def ansi_c_quote(text: str | bytes) -> str:
    """``text`` (or its UTF-8 bytes) as one bash ``$'...'`` word on one line: printable ASCII kept (``\\`` and ``'``
    escaped), every other byte as ``\\xHH``, so bash rebuilds exactly those bytes."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    out = ["$'"]
    for byte in data:
        if byte in (0x5C, 0x27):
            out.append("\\" + chr(byte))
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02x}")
    out.append("'")
    return "".join(out)


SHELL_INIT = (
    b"__oe_end() { __oe_s=$? __oe_o=$SHELLOPTS __oe_f=$- POSIXLY_CORRECT=y; \\set +vx; \\unset -f builtin printf; "
    b'\\builtin printf \'%s\\0%s\\0%s\\0\' "$__oe_s" "$__oe_f" "$PWD" >&99 && \\trap -p DEBUG >&99 '
    b"&& \\builtin printf '\\0' >&99 || \\exit 97; \\trap - DEBUG; "
    b"[[ :$__oe_o: == *:posix:* ]] || \\unset POSIXLY_CORRECT; }; declare -ft __oe_end\n"
)
"""The harness's end-of-step function, defined once when the shell starts; ``command_line`` calls it right after the
agent's command, with its stdout and stderr on /dev/null (so neither an agent's DEBUG trap nor ``set -x`` shows
any of it: the trap fires into /dev/null, the trace goes there).

It has the trace attribute (``declare -ft``), so it sees the agent's DEBUG trap and can set it aside. Its first
command is assignments only (syntax, which no function or alias can replace) and switches on POSIX mode, where the
special builtins it uses (``set``, ``unset``, ``trap``, ``exit``) are found before any function; every command word
is quoted (``\\set``) so no alias applies, and functions named ``builtin`` or ``printf`` are removed (they would take
over the report). It writes the report on fd 99 only: status, ``$-``, ``$PWD`` and the agent's DEBUG trap; then it
sets the agent's ``set -v``/``-x`` and DEBUG trap aside (``command_line`` puts them back inside the next ``eval``,
so they see only the agent's commands) and leaves POSIX mode unless the agent was in it. A shell where the report
cannot be written exits (97): the harness restarts it. The step line stays short on purpose: bash reads a pipe one
byte at a time."""


def command_line(command: str, flags: str = "", debug_trap: bytes = b"") -> bytes:
    """The one input line that runs ``command`` in the agent's shell and then reports (``SHELL_INIT``).

    ``flags`` (the agent's ``v``/``x`` options) and ``debug_trap`` (its ``trap -p DEBUG`` line) come from the
    previous report: they are put back first thing inside the ``eval``, so the agent's tracing starts at its own
    command. The ``eval`` runs with stdin from /dev/null and the control descriptor closed; fds 97 and 98 keep the
    shell's stdout and stderr while the report runs (the driver looks at them: ``driver.settled``)."""
    restore = debug_trap.rstrip(b"\n") + b"\n" if debug_trap else b""
    shell_flags = "".join(f for f in "vx" if f in flags)
    if shell_flags:
        restore += f"set -{shell_flags}\n".encode()
    body = ansi_c_quote(restore + command.encode("utf-8", "surrogatepass"))
    return f"\\eval {body} </dev/null 99>&-; {{ \\__oe_end; }} 97>&1 98>&2 >/dev/null 2>&1\n".encode()
