"""Wire models of the SQL (data questions) environment."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from openenv_echo.wire import Action, Observation

from .tasks import TEMPLATE_NAMES

TemplateName = Literal[
    "orders_by_country_year",
    "revenue_by_category_year",
    "top_product_units",
    "top_employee_status",
    "customers_without_orders",
    "avg_order_value",
    "manager_of",
    "cancel_rate",
    "city_most_customers",
    "distinct_products_of_customer",
    "slow_shipments",
    "supplier_top_revenue",
]
"""Reset option ``template``: force the question template (published as an enum in the OpenAPI reset schema)."""
assert get_args(TemplateName) == TEMPLATE_NAMES


class SqlAction(Action):
    """Either a read-only SQL query or the final answer. Give exactly one: an action with both or neither is
    answered with a harness format warning (a step, not an error), like any other malformed agent input."""

    query: str | None = Field(
        default=None,
        max_length=65536,
        description="One SQLite statement to run read-only (SELECT, WITH ..., read-only PRAGMA table_info(...)). "
        "Results come back as a text table, capped in rows and bytes.",
    )
    answer: str | None = Field(
        default=None,
        max_length=4096,
        description="The final answer to the question (a number or a name, as the question asks); ends the episode.",
    )


class SqlObservation(Observation):
    """``sqlite> <query>`` (warning), the result table or the engine's error text (env_output), harness notices
    (warning: row/byte truncation, refusals, limits, verdict)."""

    columns: list[str] | None = Field(default=None, description="Result column names of the last query.")
    rows: list[list[Any]] | None = Field(
        default=None, description="The result rows shown (each a list of cell values; long cells cut)."
    )
    row_count: int | None = Field(default=None, ge=0, description="Number of result rows shown.")
    truncated: bool = Field(default=False, description="True when rows or bytes were cut by the caps.")
    failed: bool = Field(default=False, description="True when the action failed, was refused or was malformed.")
    error_message: str | None = Field(
        default=None, description="The database's error text, or the harness's reason for a refusal."
    )
    steps_left: int = Field(default=0, ge=0, description="Steps left before the episode ends without an answer.")


class QueryArguments(BaseModel):
    """Arguments of the ``query`` tool."""

    sql: str = Field(description="One read-only SQLite statement.", max_length=65536)


class AnswerArguments(BaseModel):
    """Arguments of the ``answer`` tool: the final answer; ends the episode."""

    answer: str = Field(description="The value the question asks for.", max_length=4096)
