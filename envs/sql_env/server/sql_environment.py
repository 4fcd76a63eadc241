"""``SqlEnvironment``: answer a data question over a seeded in-memory SQLite database with read-only SQL.

Role tagging at emit time:

* reset: the question, schema and instructions are ``context``;
* query step: the echoed ``sqlite> <query>`` is ``warning``; the result table with its ``(N rows)`` footer is
  ``env_output``; for a failing query the harness prefix ``ERROR:  `` is ``warning`` and the engine's own message
  (``near "SELEC": syntax error``, ``no such column: x``) is ``env_output`` — it is what the database answered;
  guard refusals (writes, ATTACH, PRAGMA changes, wall-clock functions), the work-limit stop, row/byte truncation
  notices, format messages and the verdict are ``warning``;
* answer step: ``answer> <text>`` and the verdict are ``warning``.

Reward: 1.0 for a correct answer, 0.0 for a wrong one, 0.0 on every other step (and when ``max_steps`` runs out).
"""

from __future__ import annotations

import math
import random
import sqlite3
from typing import Any

from openenv_echo.envs.splits import TASK_SPLITS
from openenv_echo.server.environment import EnvError, Environment, MaxSteps
from openenv_echo.server.tools import EnvTool
from openenv_echo.wire import ErrorCode, Segment, context, env_output, warning

from .database import generate_database, schema_summary
from .formatting import MAX_CELL, cell, footer, long_cells, table_lines
from .guard import Guard, GuardLimits, Refusal
from .models import AnswerArguments, QueryArguments, SqlAction, SqlObservation, TemplateName
from .tasks import TEMPLATE_NAMES, Task, check, make_task

DEFAULT_MAX_STEPS = 20
MAX_ROWS = 50
MAX_BYTES = 4096
ECHO_CHARS = 512


def task_text(task: Task, schema: str, max_steps: int) -> str:
    return (
        "You are a data analyst with read-only SQL access to a company's SQLite sales database.\n\n"
        f"Question: {task.question}\n\n"
        f"Tables:\n{schema}\n\n"
        'Send one SQLite query per step as {"query": "SELECT ..."}; results come back as text tables (at most '
        f'{MAX_ROWS} rows). When you know the answer, send {{"answer": "..."}} with just the value. '
        f"You have {max_steps} steps, the answer included.\n"
    )


class SqlEnvironment(Environment[SqlAction, SqlObservation]):
    """Data questions over a generated SQLite database; read-only, bounded queries; answer to finish."""

    name = "sql"
    action_type = SqlAction
    observation_type = SqlObservation
    BLOCKING = True  # a query may run for its whole VM-step budget
    TASK_SEEDS = TASK_SPLITS
    TOOLS = (
        EnvTool(
            name="query",
            description="Run one read-only SQLite query; returns its columns and rows, or the error.",
            arguments=QueryArguments,
            action=lambda a: SqlAction(query=a.sql),
            result=lambda obs: {
                "columns": obs.columns,
                "rows": obs.rows,
                "truncated": obs.truncated,
                "error": obs.error_message,
            },
        ),
        EnvTool(
            name="answer",
            description="Give the final answer to the question; ends the episode.",
            arguments=AnswerArguments,
            action=lambda a: SqlAction(answer=a.answer),
            result=lambda obs: {"reward": obs.reward, "done": obs.done},
        ),
    )

    def __init__(self) -> None:
        super().__init__()
        self.conn: sqlite3.Connection | None = None
        self.guard: Guard | None = None
        self.task: Task | None = None
        self.seed: int | None = None
        self.max_steps = DEFAULT_MAX_STEPS

    def _reset(
        self, seed: int | None, template: TemplateName | None = None, max_steps: MaxSteps = DEFAULT_MAX_STEPS
    ) -> SqlObservation:
        if template is not None and template not in TEMPLATE_NAMES:
            raise EnvError(
                f"unknown task template {template!r}; known: {', '.join(TEMPLATE_NAMES)}", ErrorCode.VALIDATION_ERROR
            )
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or not 1 <= max_steps <= 1000:
            raise EnvError("max_steps must be an integer in [1, 1000]", ErrorCode.VALIDATION_ERROR)
        self.close()
        if seed is None:
            seed = random.SystemRandom().randrange(2**32)
        self.seed = seed
        self.max_steps = max_steps
        conn = generate_database(seed)
        self.task = make_task(conn, seed, template)
        schema = schema_summary(conn)
        self.guard = Guard(conn, seed, GuardLimits())
        self.conn = conn
        return SqlObservation(
            segments=[context(task_text(self.task, schema, max_steps))],
            steps_left=max_steps,
            metadata={"seed": seed, "template": self.task.template},
        )

    def _step(self, action: SqlAction) -> SqlObservation:
        assert self.guard is not None and self.task is not None
        steps_left = self.max_steps - (self._step_count + 1)
        fields: dict[str, Any] = {}
        done, reward = False, 0.0
        metadata: dict[str, Any] = {}
        text = action.answer if action.answer is not None else action.query or ""
        if (action.query is None) == (action.answer is None):
            segments = [warning(f"[harness: {ONE_OF}]\n")]
            fields = _failed(ONE_OF)
        elif not _valid_text(text):
            segments = [
                warning(f"{'answer' if action.answer is not None else 'sqlite'}> {_clip(text)}\n"),
                warning(f"[harness: {NOT_UNICODE}]\n"),
            ]
            fields = _failed(NOT_UNICODE)
        elif action.answer is not None:
            ok = check(self.task, action.answer)
            done, reward = True, 1.0 if ok else 0.0
            segments = [
                warning(f"answer> {_clip(action.answer)}\n"),
                warning(f"[harness: answer recorded: {'correct' if ok else 'wrong'}; reward {reward:g}]\n"),
            ]
            metadata = {"answer": action.answer, "expected": self.task.answer, "score": reward}
        else:
            segments, fields = self._query(action.query or "")
        if not done and steps_left <= 0:
            done = True
            segments.append(
                warning(f"[harness: step limit ({self.max_steps}) reached without an answer; episode over, reward 0]\n")
            )
            metadata = {"expected": self.task.answer, "score": 0.0}
        return SqlObservation(
            segments=segments, reward=reward, done=done, steps_left=max(steps_left, 0), metadata=metadata, **fields
        )

    def _query(self, sql: str) -> tuple[list[Segment], dict[str, Any]]:
        assert self.guard is not None
        segments: list[Segment] = [warning(f"sqlite> {_clip(sql)}\n")]
        if not sql.strip():
            segments.append(warning(f"[harness: {EMPTY_QUERY}]\n"))
            return segments, _failed(EMPTY_QUERY)
        try:
            cols, rows, more = self.guard.run(sql, MAX_ROWS)
        except Refusal as e:
            segments.append(warning(f"[harness: {e}]\n"))
            return segments, _failed(str(e))
        except sqlite3.Error as e:
            segments += [warning("ERROR:  "), env_output(f"{e}\n")]
            return segments, _failed(str(e))
        if not cols:
            segments.append(env_output(footer(0)))
            return segments, {"columns": [], "rows": [], "row_count": 0}
        lines = table_lines(cols, rows)
        kept, size = [], 0
        for line in lines:
            n = len(line.encode("utf-8"))
            if size + n > MAX_BYTES:
                break
            kept.append(line)
            size += n
        shown = max(len(kept) - 2, 0)
        byte_cut = len(kept) < len(lines)
        if len(kept) < 2:  # even the header is too wide: cut it by characters
            kept = [("".join(lines[:2]).encode("utf-8")[:MAX_BYTES].decode("utf-8", "ignore"))]
        truncated = more or byte_cut
        body = "".join(kept) + ("" if truncated else footer(len(rows)))
        segments.append(env_output(body))
        if byte_cut:
            segments.append(
                warning(
                    f"{'' if body.endswith(chr(10)) else chr(10)}[harness: output truncated at "
                    f"{MAX_BYTES} bytes: showing {shown} of the first {len(rows)} rows"
                    f"{'; more rows exist' if more else ''}; select fewer columns or rows]\n"
                )
            )
        elif more:
            segments.append(
                warning(
                    f"[harness: showing the first {MAX_ROWS} rows; the query returned more (add LIMIT or aggregate)]\n"
                )
            )
        if long_cells(rows):
            truncated = True
            segments.append(warning(f"[harness: values longer than {MAX_CELL} characters are cut (…)]\n"))
        values = [[_json_cell(v) for v in row] for row in rows[:shown]]
        return segments, {"columns": cols, "rows": values, "row_count": shown, "truncated": truncated}

    def extra_state(self) -> dict[str, Any]:
        if self.task is None:
            return {}
        return {"seed": self.seed, "template": self.task.template, "max_steps": self.max_steps}

    def close(self) -> None:
        if self.guard is not None:
            self.guard.close()
        if self.conn is not None:
            self.conn.close()
        self.guard = self.conn = None


ONE_OF = 'send exactly one of {"query": "SELECT ..."} or {"answer": "..."}'
NOT_UNICODE = "rejected: the text is not valid Unicode (lone surrogate)"
EMPTY_QUERY = "empty query; send one SQL statement"


def _failed(message: str) -> dict[str, Any]:
    """The typed fields of a failed, refused or malformed action."""
    return {"failed": True, "error_message": message}


def _json_cell(value: object) -> object:
    """A result cell as a JSON value: numbers and NULL as they are, text cut like the table, blobs as shown."""
    if value is None or isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    if isinstance(value, str) and len(value) <= MAX_CELL:
        return value
    return cell(value)


def _clip(text: str) -> str:
    """The echoed text (cut when long; lone surrogates escaped, since they cannot be sent as UTF-8)."""
    text = text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + f"… [{len(text) - ECHO_CHARS} more characters]"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _valid_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
