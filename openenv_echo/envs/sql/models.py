"""Wire models of the SQL (data questions) environment."""

from __future__ import annotations

from pydantic import Field, model_validator

from ...wire import Action, Observation


class SqlAction(Action):
    """Either a read-only SQL query or the final answer (exactly one of the two)."""

    query: str | None = Field(
        default=None, max_length=65536,
        description="One SQLite statement to run read-only (SELECT, WITH ..., read-only PRAGMA table_info(...)). "
        "Results come back as a text table, capped in rows and bytes.",
    )
    answer: str | None = Field(
        default=None, max_length=4096,
        description="The final answer to the question (a number or a name, as the question asks); ends the episode.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> SqlAction:
        if (self.query is None) == (self.answer is None):
            raise ValueError("give exactly one of 'query' or 'answer'")
        return self


class SqlObservation(Observation):
    """``sqlite> <query>`` (warning), the result table or the engine's error text (env_output), harness notices
    (warning: row/byte truncation, refusals, limits, verdict)."""

    columns: list[str] | None = Field(default=None, description="Result column names of the last query.")
    row_count: int | None = Field(default=None, ge=0, description="Number of result rows shown.")
    truncated: bool = Field(default=False, description="True when rows or bytes were cut by the caps.")
    error: bool = Field(default=False, description="True when the query failed or was refused.")
    steps_left: int = Field(default=0, ge=0, description="Steps left before the episode ends without an answer.")
