"""Whether a chat template writes message contents verbatim whatever they are, decided from its syntax tree.

Offline assembly renders a conversation twice: once with placeholders as contents (memoized per conversation
shape) and once with the real contents, to see whether the template rewrote them (``trim``, dropped reasoning).
For a template that only ever *concatenates* a message's content into its output, and lets nothing else depend
on it, the second render is the first with the contents put in place of the placeholders, so it can be skipped.

``content_guards`` says so conservatively: every read of a ``content`` key (attribute or item), or of a name set
to one, must sit in an output expression joined only by ``+`` / ``~``, or be the subject of a test
``{% if '<const>' in content %}`` whose body is then not looked at: the template is verbatim for contents
without any such constant (Qwen3's ``'</think>' in content``), which ``rendered`` checks per conversation. A
message (a loop variable over ``messages``, an item of ``messages``) may only be read through constant keys (not
methods, not as a whole, not passed to a filter); ``messages`` itself only looped over, indexed (no slices) or
counted; ``loop.previtem`` / ``loop.nextitem`` are not read; no macros, includes, imports, blocks, filter or call
blocks, no autoescape (environment or block) or finalize. Anything else (``message.content | trim``,
``content.split(...)`` outside such a test, ``message | tojson``) makes it None, and the template is rendered as
before.
"""

from __future__ import annotations

import functools
from typing import Any

_REJECT_STATEMENTS = (
    "Macro",
    "CallBlock",
    "FilterBlock",
    "Include",
    "Import",
    "FromImport",
    "Extends",
    "Block",
    "ScopedEvalContextModifier",  # {% autoescape %}: would escape contents
    "EvalContextModifier",
)
_COUNTERS = frozenset({"length", "count"})
_DICT_METHODS = frozenset(dir(dict))


@functools.lru_cache(maxsize=64)
def content_guards(template: str) -> frozenset[str] | None:
    """The constant strings whose absence from every message content makes ``template`` write each content
    verbatim with nothing else depending on it (module docstring); empty when that holds always, None when
    unsure or when the template cannot be parsed as transformers parses it."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        env = _compile_jinja_template(template).environment
        tree = env.parse(template)
    except Exception:  # another transformers, or a template it cannot compile: render it
        return None
    if env.autoescape or env.finalize is not None:
        return None
    check = _Check(tree)
    return frozenset(check.guards) if check.ok else None


def content_verbatim(template: str) -> bool:
    """Whether ``template`` writes message contents verbatim whatever they are (``content_guards`` is empty)."""
    return content_guards(template) == frozenset()


class _Check:
    """One walk over a template's syntax tree (see ``content_guards``)."""

    def __init__(self, tree: Any) -> None:
        from jinja2 import nodes

        self.nodes = nodes
        self.messages = {"messages"}
        for loop in tree.find_all(nodes.For):
            it, target = loop.iter, loop.target
            if isinstance(it, nodes.Name) and it.name == "messages" and isinstance(target, nodes.Name):
                self.messages.add(target.name)
        # names that hold a content (``set content = message.content``), to a fixed point
        self.aliases: set[str] = set()
        while True:
            found = {
                a.target.name
                for a in tree.find_all(nodes.Assign)
                if isinstance(a.target, nodes.Name) and self._is_content(a.node)
            }
            if found <= self.aliases:
                break
            self.aliases |= found
        self.guards: set[str] = set()
        self.ok = not (self.aliases & self.messages)
        self._walk(tree, [])

    def _walk(self, node: Any, parents: list[Any]) -> None:
        if not self.ok:
            return
        if type(node).__name__ in _REJECT_STATEMENTS or not self._allowed(node, parents):
            self.ok = False
            return
        n = self.nodes
        guard = self._guard(node.test) if isinstance(node, n.If) else None
        parents.append(node)
        if guard is not None:  # the body runs only if a content holds the guard: then the template is rendered
            self.guards.add(guard)
            children = [*node.elif_, *node.else_]
        else:
            children = list(node.iter_child_nodes())
        for child in children:
            self._walk(child, parents)
        parents.pop()

    def _guard(self, test: Any) -> str | None:
        """``'<const>' in <content>``: the constant, else None."""
        n = self.nodes
        if (
            isinstance(test, n.Compare)
            and isinstance(test.expr, n.Const)
            and isinstance(test.expr.value, str)
            and test.expr.value
            and len(test.ops) == 1
            and test.ops[0].op == "in"
            and self._is_content(test.ops[0].expr)
        ):
            return test.expr.value
        return None

    def _key(self, node: Any) -> str | None:
        """The constant key a ``Getattr`` / ``Getitem`` reads, else None."""
        n = self.nodes
        if isinstance(node, n.Getattr):
            return str(node.attr)
        if isinstance(node, n.Getitem) and isinstance(node.arg, n.Const) and isinstance(node.arg.value, str):
            return node.arg.value
        return None

    def _is_content(self, node: Any) -> bool:
        """A read of a message's content, or of a name holding one."""
        n = self.nodes
        if isinstance(node, n.Name):
            return node.name in self.aliases and node.ctx == "load"
        return isinstance(node, (n.Getattr, n.Getitem)) and self._key(node) == "content"

    def _allowed(self, node: Any, parents: list[Any]) -> bool:
        n = self.nodes
        if isinstance(node, n.Name) and node.name in self.aliases and node.ctx == "store":
            parent = parents[-1] if parents else None  # only ever assigned a content
            return isinstance(parent, n.Assign) and parent.target is node and self._is_content(parent.node)
        if self._is_content(node):
            parent = parents[-1] if parents else None
            if isinstance(parent, n.Assign) and parent.node is node and isinstance(parent.target, n.Name):
                return True  # an alias (checked above)
            if isinstance(parent, n.Operand) and len(parents) > 1 and self._guard(parents[-2]) is not None:
                return True  # '<const>' in content (the If's body is not walked)
            for p in reversed(parents):  # only joined into the output
                if isinstance(p, n.Output):
                    return True
                if not isinstance(p, (n.Add, n.Concat)):
                    return False
            return False
        if isinstance(node, n.Getattr) and node.attr in ("previtem", "nextitem"):
            return False
        if isinstance(node, n.Name) and node.name in self.messages:
            parent = parents[-1] if parents else None
            if node.ctx != "load":
                return isinstance(parent, n.For) and parent.target is node
            return self._message_use(node, parents)
        return True

    def _message_use(self, node: Any, parents: list[Any]) -> bool:
        """A read of ``messages`` or of a message variable: only through constant keys, loops and counts."""
        n = self.nodes
        parent = parents[-1]
        if node.name == "messages":
            if isinstance(parent, n.For) and parent.iter is node:
                return True
            if isinstance(parent, n.Filter) and parent.node is node and parent.name in _COUNTERS:
                return True
            if isinstance(parent, n.Getitem) and parent.node is node and not isinstance(parent.arg, n.Slice):
                return self._read_by_key(parent, parents[:-1])  # messages[i]: a message
            return False
        return self._read_by_key(node, parents)

    def _read_by_key(self, message: Any, parents: list[Any]) -> bool:
        """``message`` (a message) is read through a constant key that is not a dict method."""
        n = self.nodes
        parent = parents[-1]
        if not isinstance(parent, (n.Getattr, n.Getitem)) or parent.node is not message:
            return False
        key = self._key(parent)
        if key is None or (isinstance(parent, n.Getattr) and key in _DICT_METHODS):
            return False
        return not (len(parents) > 1 and isinstance(parents[-2], n.Call) and parents[-2].node is parent)
