"""Scripted policies for the SQL environment: an expert (looks at the schema, runs the reference query, answers)
and non-experts (guessers and a query-happy explorer that answers from the wrong query)."""

from __future__ import annotations

import random

from .database import generate_database
from .tasks import make_task


def expert_actions(seed: int, template: str | None = None) -> list[dict[str, str]]:
    conn = generate_database(seed)
    task = make_task(conn, seed, template)
    conn.close()
    return [
        {"query": "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"},
        {"query": task.sql},
        {"answer": task.answer},
    ]


def guesser(seed: int) -> list[dict[str, str]]:
    r = random.Random(seed * 17 + 5)
    return [{"answer": str(r.randrange(0, 500))}]


def explorer(seed: int) -> list[dict[str, str]]:
    r = random.Random(seed * 29 + 11)
    queries = [
        "SELECT * FROM orders LIMIT 5",
        "SELECT COUNT(*) FROM customers",
        "PRAGMA table_info(order_items)",
        "SELECT category, COUNT(*) FROM products GROUP BY category",
        "SELECT * FROM employees",
        "SELECT status, COUNT(*) FROM orders GROUP BY status",
        "SELEC * FROM orders",
    ]
    picks = r.sample(queries, 4)
    return [*({"query": q} for q in picks), {"answer": str(r.randrange(0, 100))}]


NON_EXPERTS = {"guesser": guesser, "explorer": explorer}
