"""The bash the shell env runs in each container: the root supervisor and the agent's per-command line.

Two processes of ours live in every sandbox container:

* the **supervisor** (the container's main process, root with only ``CAP_KILL``, under Docker's init): it reads one
  request per line on its stdin and answers one line on its stdout, using bash builtins only, so it still works when
  the agent's fork bomb holds every pid of the container. ``kill`` SIGKILLs every other process (the agent's shell,
  its children, anything it left behind) until none is left; ``status PID`` answers the cgroup's OOM kills and the
  forks it refused at its pids limit so far, and the processes the agent left running besides its shell ``PID``.
* the agent's **shell**: one ``bash --noprofile --norc`` per episode (a new one after a kill or an ``exit``) as the
  unprivileged ``AGENT_UID``, fed one ``command_line`` per step on its stdin. Each line runs the agent's command with
  ``eval`` (so ``cd``, variables and functions persist between steps, as in a terminal) with stdin from /dev/null,
  then prints an end marker carrying a per-step nonce on stdout (with the exit status, the shell's pid and its
  working directory) and another on stderr, so the reader knows both streams are complete. The whole step is one
  input line, and the agent's ``set -x``/``set -v`` are switched off around the harness's part of it, so no harness
  text reaches the command's output.
"""

from __future__ import annotations

AGENT_UID = 1000
"""Unprivileged uid (and gid) of the agent's shell; it holds no capabilities."""

MARK = b"\x1e"
"""Record separator byte framing the end markers."""

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
mkdir -p /logs/agent /logs/verifier && chmod 777 /logs/agent
log "ready"
while IFS= read -r req; do
  set -- $req
  case "$1" in
    kill)
      for ((i = 0; i < 200; i++)); do
        kill -9 -1 2>/dev/null
        count_others
        ((n == 0)) && break
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
        [[ $p == "$2" ]] && continue
        uid=""
        while read -r k v _; do [[ $k == Uid: ]] && { uid=$v; break; }; done < "$d/status" 2>/dev/null
        [[ $uid == AGENT_UID ]] || continue
        read -r s < "$d/stat" 2>/dev/null || continue
        s=${s##*) }
        state=${s%% *} s=${s#* }
        [[ $state == Z ]] && continue
        [[ ${s%% *} == 1 || ${s%% *} == "$2" ]] || continue
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
    *) printf 'error unknown request\n';;
  esac
done
""".replace("AGENT_UID", str(AGENT_UID))


def ansi_c_quote(text: str) -> str:
    """``text`` as one bash ``$'...'`` word on one line: printable ASCII kept (``\\`` and ``'`` escaped), every
    other byte of its UTF-8 encoding as ``\\xHH``, so bash rebuilds exactly its bytes."""
    out = ["$'"]
    for byte in text.encode("utf-8", "surrogatepass"):
        if byte in (0x5C, 0x27):
            out.append("\\" + chr(byte))
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\x{byte:02x}")
    out.append("'")
    return "".join(out)


def command_line(command: str, nonce: str) -> bytes:
    """The one input line that runs ``command`` in the agent's shell and then prints the end markers.

    ``__oe_f`` keeps the agent's ``v``/``x`` shell options between steps: they are switched back on inside the
    ``eval`` and off again (silently) right after it. ``__oe_s`` is the command's exit status."""
    run = f'eval "${{__oe_f:+set -$__oe_f; }}"{ansi_c_quote(command)} </dev/null'
    after = "{ __oe_s=$? __oe_f=${-//[^vx]/}; set +vx; } 2>/dev/null"
    marks = (
        f'builtin printf \'\\036{nonce} %s %s %s\\036\' "$__oe_s" "$$" "$PWD"; builtin printf \'\\036{nonce}\\036\' >&2'
    )
    return f"{run}; {after}; {marks}\n".encode()


def stdout_marker(nonce: str) -> bytes:
    """The start of the stdout end marker (status, shell pid and cwd follow, then ``MARK``)."""
    return MARK + nonce.encode() + b" "


def stderr_marker(nonce: str) -> bytes:
    """The whole stderr end marker."""
    return MARK + nonce.encode() + MARK
