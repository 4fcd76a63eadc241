"""Data questions with verifiable answers, computed from the generated database by reference SQL.

Each template picks parameters that exist in the data (a country with customers, a year with orders...) and
computes the answer with its reference query on the trusted connection, before the guard is installed. Ties are
broken by a rule stated in the question, so every answer is unique.

Verification (reward 1.0 or 0.0; all non-final steps get 0.0):
* ``int``   – the submitted text parses as an integer (``1,234`` and ``1234.0`` accepted) equal to the answer;
* ``float`` – parses as a number within 0.01 of the answer (questions ask for 2 decimals, or 1 for percentages
  where the tolerance is 0.05);
* ``text``  – equal after trimming whitespace, surrounding quotes and a final period, case-insensitively.
"""

from __future__ import annotations

import random
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    template: str
    question: str
    answer: str
    answer_type: str  # int | float | text
    sql: str
    tolerance: float = 0.0


def _one(conn: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()) -> Any:
    """The first column of the first row (sqlite values are untyped), or None."""
    row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def _years(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT DISTINCT substr(order_date, 1, 4) FROM orders ORDER BY 1")]


def _inline(sql: str, params: tuple[object, ...]) -> str:
    """The reference SQL with parameters written in (for the scripted expert)."""
    out = sql
    for p in params:
        lit = str(p) if isinstance(p, (int, float)) else "'" + str(p).replace("'", "''") + "'"
        out = out.replace("?", lit, 1)
    return " ".join(out.split())


REVENUE = "oi.quantity * oi.unit_price * (1 - oi.discount)"


def orders_by_country_year(conn: sqlite3.Connection, r: random.Random) -> Task:
    country = r.choice(
        [
            x[0]
            for x in conn.execute("SELECT DISTINCT country FROM customers JOIN orders USING (customer_id) ORDER BY 1")
        ]
    )
    year = r.choice(_years(conn))
    sql = (
        "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
        "WHERE c.country = ? AND substr(o.order_date, 1, 4) = ?"
    )
    ans = _one(conn, sql, (country, year))
    return Task(
        "orders_by_country_year",
        f"How many orders were placed by customers from {country} in {year} (any status)?",
        str(ans),
        "int",
        _inline(sql, (country, year)),
    )


def revenue_by_category_year(conn: sqlite3.Connection, r: random.Random) -> Task:
    cat = r.choice([x[0] for x in conn.execute("SELECT DISTINCT category FROM products ORDER BY 1")])
    year = r.choice(_years(conn))
    sql = (
        f"SELECT ROUND(SUM({REVENUE}), 2) FROM order_items oi JOIN orders o ON o.order_id = oi.order_id "
        "JOIN products p ON p.product_id = oi.product_id "
        "WHERE p.category = ? AND substr(o.order_date, 1, 4) = ? AND o.status NOT IN ('cancelled', 'returned')"
    )
    ans = _one(conn, sql, (cat, year)) or 0.0
    return Task(
        "revenue_by_category_year",
        f"What was the total revenue from '{cat}' products in {year}? Count only orders that were not "
        f"cancelled or returned; the revenue of an order line is quantity * unit_price * (1 - discount). "
        f"Round to 2 decimal places.",
        f"{float(ans):.2f}",
        "float",
        _inline(sql, (cat, year)),
        0.01,
    )


def top_product_units(conn: sqlite3.Connection, r: random.Random) -> Task:
    year = r.choice(_years(conn))
    sql = (
        "SELECT p.name FROM order_items oi JOIN orders o ON o.order_id = oi.order_id "
        "JOIN products p ON p.product_id = oi.product_id "
        "WHERE substr(o.order_date, 1, 4) = ? AND o.status != 'cancelled' "
        "GROUP BY p.product_id ORDER BY SUM(oi.quantity) DESC, p.product_id ASC LIMIT 1"
    )
    ans = _one(conn, sql, (year,))
    return Task(
        "top_product_units",
        f"Which product sold the most units (total quantity) in {year}, not counting "
        f"cancelled orders? If several are tied, give the one with the smallest product_id. Answer with the "
        f"product name.",
        str(ans),
        "text",
        _inline(sql, (year,)),
    )


def top_employee_status(conn: sqlite3.Connection, r: random.Random) -> Task:
    status = r.choice(("delivered", "shipped", "cancelled", "returned"))
    sql = (
        "SELECT e.first_name || ' ' || e.last_name FROM orders o JOIN employees e ON e.employee_id = o.employee_id "
        "WHERE o.status = ? GROUP BY e.employee_id ORDER BY COUNT(*) DESC, e.employee_id ASC LIMIT 1"
    )
    ans = _one(conn, sql, (status,))
    return Task(
        "top_employee_status",
        f"Which employee handled the most orders with status '{status}'? If several "
        f"are tied, give the one with the smallest employee_id. Answer with first and last name.",
        str(ans),
        "text",
        _inline(sql, (status,)),
    )


def customers_without_orders(conn: sqlite3.Connection, r: random.Random) -> Task:
    segment = r.choice(("consumer", "corporate", "small_business", None))
    if segment is None:
        sql = (
            "SELECT COUNT(*) FROM customers c WHERE NOT EXISTS "
            "(SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)"
        )
        params: tuple[object, ...] = ()
        q = "How many customers have never placed an order?"
    else:
        sql = (
            "SELECT COUNT(*) FROM customers c WHERE c.segment = ? AND NOT EXISTS "
            "(SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)"
        )
        params = (segment,)
        q = f"How many customers in the '{segment}' segment have never placed an order?"
    return Task("customers_without_orders", q, str(_one(conn, sql, params)), "int", _inline(sql, params))


def avg_order_value(conn: sqlite3.Connection, r: random.Random) -> Task:
    segment = r.choice(("consumer", "corporate", "small_business"))
    sql = (
        f"SELECT ROUND(AVG(v), 2) FROM (SELECT SUM({REVENUE}) AS v FROM orders o "
        "JOIN customers c ON c.customer_id = o.customer_id JOIN order_items oi ON oi.order_id = o.order_id "
        "WHERE c.segment = ? AND o.status != 'cancelled' GROUP BY o.order_id)"
    )
    ans = _one(conn, sql, (segment,)) or 0.0
    return Task(
        "avg_order_value",
        f"What is the average order value of non-cancelled orders placed by "
        f"'{segment}' customers? An order's value is the sum over its lines of quantity * unit_price * "
        f"(1 - discount); freight is not included. Round to 2 decimal places.",
        f"{float(ans):.2f}",
        "float",
        _inline(sql, (segment,)),
        0.01,
    )


def manager_of(conn: sqlite3.Connection, r: random.Random) -> Task:
    rows = conn.execute(
        "SELECT employee_id, first_name, last_name FROM employees WHERE manager_id IS NOT NULL "
        "AND manager_id != 1 ORDER BY employee_id"
    ).fetchall()
    eid, fn, ln = r.choice(rows)
    sql = (
        "SELECT m.first_name || ' ' || m.last_name FROM employees e JOIN employees m ON m.employee_id = "
        "e.manager_id WHERE e.employee_id = ?"
    )
    return Task(
        "manager_of",
        f"Who is the manager of the employee {fn} {ln} (employee_id {eid})? Answer with first and last name.",
        str(_one(conn, sql, (eid,))),
        "text",
        _inline(sql, (eid,)),
    )


def cancel_rate(conn: sqlite3.Connection, r: random.Random) -> Task:
    year = r.choice(_years(conn))
    sql = "SELECT ROUND(100.0 * SUM(status = 'cancelled') / COUNT(*), 1) FROM orders WHERE substr(order_date, 1, 4) = ?"
    ans = _one(conn, sql, (year,)) or 0.0
    return Task(
        "cancel_rate",
        f"What percentage of the orders placed in {year} were cancelled? Round to 1 decimal place (e.g. 12.5).",
        f"{float(ans):.1f}",
        "float",
        _inline(sql, (year,)),
        0.05,
    )


def city_most_customers(conn: sqlite3.Connection, r: random.Random) -> Task:
    country = r.choice([x[0] for x in conn.execute("SELECT DISTINCT country FROM customers ORDER BY 1")])
    sql = "SELECT city FROM customers WHERE country = ? GROUP BY city ORDER BY COUNT(*) DESC, city ASC LIMIT 1"
    return Task(
        "city_most_customers",
        f"Which city in {country} has the most customers? If several are tied, give the alphabetically first.",
        str(_one(conn, sql, (country,))),
        "text",
        _inline(sql, (country,)),
    )


def distinct_products_of_customer(conn: sqlite3.Connection, r: random.Random) -> Task:
    rows = conn.execute(
        "SELECT DISTINCT c.customer_id, c.first_name, c.last_name FROM customers c JOIN orders o "
        "ON o.customer_id = c.customer_id ORDER BY 1"
    ).fetchall()
    cid, fn, ln = r.choice(rows)
    sql = (
        "SELECT COUNT(DISTINCT oi.product_id) FROM orders o JOIN order_items oi ON oi.order_id = o.order_id "
        "WHERE o.customer_id = ?"
    )
    return Task(
        "distinct_products_of_customer",
        f"How many distinct products has the customer {fn} {ln} "
        f"(customer_id {cid}) ordered, over all their orders (any status)?",
        str(_one(conn, sql, (cid,))),
        "int",
        _inline(sql, (cid,)),
    )


def slow_shipments(conn: sqlite3.Connection, r: random.Random) -> Task:
    days = r.choice((5, 7, 10))
    sql = "SELECT COUNT(*) FROM orders WHERE ship_date IS NOT NULL AND julianday(ship_date) - julianday(order_date) > ?"
    return Task(
        "slow_shipments",
        f"How many orders were shipped more than {days} days after they were placed?",
        str(_one(conn, sql, (days,))),
        "int",
        _inline(sql, (days,)),
    )


def supplier_top_revenue(conn: sqlite3.Connection, r: random.Random) -> Task:
    sql = (
        f"SELECT s.name FROM order_items oi JOIN orders o ON o.order_id = oi.order_id JOIN products p ON "
        f"p.product_id = oi.product_id JOIN suppliers s ON s.supplier_id = p.supplier_id WHERE o.status NOT IN "
        f"('cancelled', 'returned') GROUP BY s.supplier_id ORDER BY SUM({REVENUE}) DESC, s.supplier_id ASC LIMIT 1"
    )
    return Task(
        "supplier_top_revenue",
        "Which supplier's products brought in the most revenue over all orders that "
        "were not cancelled or returned (line revenue = quantity * unit_price * (1 - discount))? If tied, "
        "give the one with the smallest supplier_id. Answer with the supplier name.",
        str(_one(conn, sql)),
        "text",
        _inline(sql, ()),
    )


TEMPLATES: tuple[Callable[[sqlite3.Connection, random.Random], Task], ...] = (
    orders_by_country_year,
    revenue_by_category_year,
    top_product_units,
    top_employee_status,
    customers_without_orders,
    avg_order_value,
    manager_of,
    cancel_rate,
    city_most_customers,
    distinct_products_of_customer,
    slow_shipments,
    supplier_top_revenue,
)
TEMPLATE_NAMES = tuple(t.__name__ for t in TEMPLATES)


def make_task(conn: sqlite3.Connection, seed: int, template: str | None = None) -> Task:
    r = random.Random(seed * 7_919 + 1)
    fn = r.choice(TEMPLATES) if template is None else dict(zip(TEMPLATE_NAMES, TEMPLATES, strict=True))[template]
    return fn(conn, r)


_NUM = re.compile(r"^[-+]?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?$")


def _number(text: str) -> float | None:
    t = text.strip().rstrip(".").replace(" ", "").lstrip("$").rstrip("%")
    if not t or not _NUM.match(t) or t in ("+", "-", "."):
        return None
    try:
        return float(t.replace(",", ""))
    except ValueError:
        return None


def _norm_text(text: str) -> str:
    t = text.strip()
    if len(t) > 1 and t[-1] == "." and not t[-2].isdigit():
        t = t[:-1]
    t = t.strip().strip("'\"`").strip()
    return " ".join(t.split()).casefold()


def check(task: Task, submitted: str) -> bool:
    if task.answer_type == "int":
        v = _number(submitted)
        return v is not None and v == int(task.answer) and float(v).is_integer()
    if task.answer_type == "float":
        v = _number(submitted)
        return v is not None and abs(v - float(task.answer)) <= task.tolerance + 1e-9
    return _norm_text(submitted) == _norm_text(task.answer)
