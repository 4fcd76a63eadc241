"""SqlEnvironment: read-only bounded queries, role tagging, verifiable answers, determinism."""

from __future__ import annotations

import pytest
from sql_env.server import (
    NON_EXPERTS,
    TEMPLATE_NAMES,
    SqlAction,
    SqlEnvironment,
    expert_actions,
    generate_database,
)
from sql_env.server.tasks import check, make_task

from openenv_echo.roles import Role
from openenv_echo.server.environment import EnvError


@pytest.fixture
def env():
    e = SqlEnvironment()
    e.reset(seed=5, max_steps=200)
    yield e
    e.close()


def q(env: SqlEnvironment, sql: str):
    return env.step(SqlAction(query=sql))


def test_reset_is_all_context():
    e = SqlEnvironment()
    obs = e.reset(seed=5)
    assert [s.role for s in obs.segments] == [Role.CONTEXT]
    assert e.task.question in obs.text and "order_items(order_id INTEGER" in obs.text
    assert obs.reward is None and obs.steps_left == 20


def test_result_table_roles(env):
    obs = q(env, "SELECT order_id, status FROM orders ORDER BY order_id LIMIT 2")
    assert [s.role for s in obs.segments] == [Role.WARNING, Role.ENV_OUTPUT]
    assert obs.segments[0].text == "sqlite> SELECT order_id, status FROM orders ORDER BY order_id LIMIT 2\n"
    body = obs.segments[1].text.splitlines()
    assert body[0].split("|")[0].strip() == "order_id" and set(body[1]) <= {"-", "+"}
    assert body[2].split("|")[0].strip() == "1" and body[-1] == "(2 rows)"
    assert (obs.columns, obs.row_count, obs.truncated, obs.failed) == (["order_id", "status"], 2, False, False)


def test_row_and_byte_caps_are_warnings(env):
    obs = q(env, "SELECT order_id FROM orders")
    assert [s.role for s in obs.segments] == [Role.WARNING, Role.ENV_OUTPUT, Role.WARNING]
    assert obs.row_count == 50 and obs.truncated and "(50 rows)" not in obs.text
    assert "showing the first 50 rows" in obs.segments[2].text
    obs = q(env, "SELECT * FROM customers")
    assert len(obs.segments[1].text.encode()) <= 4096 and "output truncated at 4096 bytes" in obs.segments[2].text


def test_engine_errors_split_prefix_and_message(env):
    obs = q(env, "SELEC * FROM orders")
    assert [(s.role, s.text) for s in obs.segments[1:]] == [
        (Role.WARNING, "ERROR:  "),
        (Role.ENV_OUTPUT, 'near "SELEC": syntax error\n'),
    ]
    assert obs.failed and not obs.done
    assert q(env, "SELECT nope FROM orders").segments[2].text == "no such column: nope\n"
    assert q(env, "SELECT * FROM nowhere").segments[2].text == "no such table: nowhere\n"


@pytest.mark.parametrize(
    "sql,needle",
    [
        (
            "INSERT INTO orders (order_id, customer_id, employee_id, order_date, status, freight) "
            "VALUES (99999, 1, 1, '2024-01-01', 'shipped', 1)",
            "INSERT is not allowed",
        ),
        ("UPDATE orders SET freight = 0", "UPDATE is not allowed"),
        ("DELETE FROM orders", "DELETE is not allowed"),
        ("DROP TABLE orders", "DROP TABLE is not allowed"),
        ("CREATE TABLE x (a)", "CREATE TABLE is not allowed"),
        ("CREATE TEMP VIEW v AS SELECT 1", "CREATE TEMP is not allowed"),
        ("ALTER TABLE orders ADD COLUMN x", "ALTER is not allowed"),
        ("ATTACH DATABASE '/etc/passwd' AS host", "ATTACH is not allowed"),
        ("ATTACH DATABASE 'file:/tmp/x.db?mode=rwc' AS host", "ATTACH is not allowed"),
        ("PRAGMA query_only = 0", "PRAGMA query_only = 0 is not allowed"),
        ("PRAGMA writable_schema = ON", "PRAGMA writable_schema"),
        ("PRAGMA journal_mode = WAL", "PRAGMA journal_mode"),
        ("SELECT load_extension('/tmp/evil.so')", "load_extension() is not available"),
        ("BEGIN", "BEGIN is not allowed"),
        ("VACUUM", "VACUUM is not allowed"),
        ("VACUUM INTO '/tmp/copy.db'", "VACUUM is not allowed"),
        ("SELECT 1; DROP TABLE orders", "one SQL statement per query"),
        ("SELECT sqlite_version()", "sqlite_version() is not available"),
        ("PRAGMA compile_options", "PRAGMA compile_options is not allowed"),
        ("SELECT " + ",".join(["zeroblob(900000)"] * 60), "MB of database memory"),
        (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(printf('%d', x)) FROM c",
            "function calls included",
        ),
        ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c", "work limit"),
        ("SELECT count(*) FROM order_items a, order_items b, order_items c", "work limit"),
        ("SELECT " + " + ".join(["1"] * 2000), "exceeds the 4000-character limit"),
        ("SELECT 1\x00", "NUL"),
    ],
)
def test_hostile_queries_are_refused_and_nothing_changes(env, sql, needle):
    before = q(env, "SELECT COUNT(*), SUM(freight) FROM orders").segments[1].text
    obs = q(env, sql)
    assert [s.role for s in obs.segments] == [Role.WARNING, Role.WARNING], obs.segments
    assert obs.failed and needle in obs.segments[1].text and not obs.done
    assert q(env, "SELECT COUNT(*), SUM(freight) FROM orders").segments[1].text == before
    names = q(env, "SELECT group_concat(name) FROM (SELECT name FROM sqlite_master ORDER BY name)").text
    assert "customers,employees" in names and "idx_" in names


def test_engine_limits_apply(env):
    obs = q(env, "SELECT zeroblob(100000000)")
    assert obs.segments[2].text == "string or blob too big\n"
    obs = q(env, "SELECT printf('%.*c', 100000000, 'x')")
    assert obs.segments[2].text == "string or blob too big\n"
    obs = q(env, "SELECT length(printf('%.*c', 5000, 'x'))")
    assert "5000" in obs.segments[1].text


def test_server_side_functions_are_deterministic():
    def run() -> list[str]:
        e = SqlEnvironment()
        e.reset(seed=9)
        out = [
            q(e, s).text
            for s in (
                "SELECT random(), hex(randomblob(8))",
                "SELECT random()",
                "SELECT date('2024-02-28', '+1 day'), strftime('%Y', '2024-05-01')",
            )
        ]
        e.close()
        return out

    a = run()
    assert a == run() and "2024-02-29" in a[2]


def test_read_only_pragmas_and_schema_reads_work(env):
    assert "order_date" in q(env, "PRAGMA table_info(orders)").text
    assert "customers" in q(env, "PRAGMA foreign_key_list(orders)").text
    assert "CREATE TABLE orders" in q(env, "SELECT sql FROM sqlite_master WHERE name = 'orders'").text
    assert "(1 row)" in q(env, "EXPLAIN QUERY PLAN SELECT * FROM orders WHERE order_id = 1").text


def test_answer_scoring():
    for seed in range(3):
        e = SqlEnvironment()
        e.reset(seed=seed)
        obs = e.step(SqlAction(answer=e.task.answer))
        assert obs.done and obs.reward == 1.0
        assert [s.role for s in obs.segments] == [Role.WARNING, Role.WARNING]
        assert obs.metadata["expected"] == e.task.answer
        e.reset(seed=seed)
        assert e.step(SqlAction(answer="definitely wrong")).reward == 0.0


def test_answer_normalization():
    conn = generate_database(1)
    t_int = make_task(conn, 1, "customers_without_orders")
    t_float = make_task(conn, 1, "avg_order_value")
    t_text = make_task(conn, 1, "manager_of")
    n = int(t_int.answer)
    assert check(t_int, f"{n}") and check(t_int, f" {n}.0 ") and not check(t_int, f"{n + 1}")
    assert check(t_int, f"{n:,}") and not check(t_int, "many")
    v = float(t_float.answer)
    assert check(t_float, f"{v:.2f}") and check(t_float, f"{v + 0.004:.3f}") and not check(t_float, f"{v + 0.5}")
    assert check(t_text, t_text.answer.upper()) and check(t_text, f"'{t_text.answer}'.")
    assert not check(t_text, t_text.answer + "x")


def test_action_needs_exactly_one_field(env):
    for action in (SqlAction(), SqlAction(query="SELECT 1", answer="1")):
        obs = env.step(action)
        assert [s.role for s in obs.segments] == [Role.WARNING] and "exactly one of" in obs.text
        assert obs.failed and not obs.done and obs.reward == 0.0
    with pytest.raises(ValueError):
        SqlAction(query="SELECT 1", extra="x")
    with pytest.raises(ValueError):
        SqlAction(query=["SELECT 1"])


def test_reset_options_are_validated():
    with pytest.raises(EnvError):
        SqlEnvironment().reset(seed=1, template="nope")
    e = SqlEnvironment()
    e.reset(seed=1, template="manager_of")
    assert e.task.template == "manager_of" and e.state.model_dump()["template"] == "manager_of"


def test_step_limit_ends_with_zero():
    e = SqlEnvironment()
    e.reset(seed=2, max_steps=2)
    assert not q(e, "SELECT 1").done
    obs = q(e, "SELECT 1")
    assert obs.done and obs.reward == 0.0 and "step limit (2)" in obs.segments[-1].text


@pytest.mark.parametrize("template", TEMPLATE_NAMES)
def test_expert_solves_every_template(template):
    for seed in (10, 11, 12):
        e = SqlEnvironment()
        e.reset(seed=seed, template=template)
        for a in expert_actions(seed, template):
            obs = e.step(SqlAction(**a))
        assert obs.reward == 1.0, (seed, template, obs.text)
        e.close()


def test_non_experts_score_low():
    for name, policy in NON_EXPERTS.items():
        rewards = []
        for seed in range(8):
            e = SqlEnvironment()
            e.reset(seed=seed)
            for a in policy(seed):
                obs = e.step(SqlAction(**a))
            rewards.append(obs.reward)
        assert sum(rewards) / len(rewards) < 0.5, name


def test_determinism_and_seed_variety():
    def episode(seed: int) -> list[str]:
        e = SqlEnvironment()
        out = [e.reset(seed=seed).model_dump_json()]
        for s in (
            "SELECT * FROM customers LIMIT 5",
            "SELECT category, COUNT(*), ROUND(AVG(unit_price), 2) FROM products GROUP BY 1",
            "SELEC",
            "SELECT MIN(order_date), MAX(order_date) FROM orders",
        ):
            out.append(q(e, s).model_dump_json())
        return out

    assert episode(31) == episode(31)
    assert episode(31)[1:] != episode(32)[1:]
    dumps = set()
    for seed in range(4):
        conn = generate_database(seed)
        dumps.add("\n".join(conn.iterdump()))
    assert len(dumps) == 4


SQL_WORDS = [
    "SELECT",
    "*",
    "FROM",
    "orders",
    "customers",
    "WHERE",
    "GROUP BY",
    "ORDER BY",
    "LIMIT",
    "1",
    "-1",
    "count(*)",
    "sum(freight)",
    "(",
    ")",
    ",",
    "'x'",
    '"now"',
    "date(",
    "printf('%.*c',",
    "1e9",
    "UNION",
    "WITH RECURSIVE",
    "c(x) AS",
    "JOIN",
    "ON",
    ";",
    "--",
    "/*",
    "PRAGMA",
    "ATTACH",
    "INSERT",
    "x'00'",
    "zeroblob(",
    "randomblob(",
    "julianday(",
    "CAST(",
    "AS TEXT)",
    "?",
    ":p",
    "$x",
    "NULL",
    "é",
    "\t",
]


def test_random_queries_never_break_the_environment():
    import hypothesis

    st = hypothesis.strategies
    e = SqlEnvironment()
    e.reset(seed=3, max_steps=1000)  # more steps than examples: the episode stays open

    @hypothesis.settings(
        max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(hypothesis.HealthCheck)
    )
    @hypothesis.given(st.lists(st.sampled_from(SQL_WORDS), min_size=1, max_size=10), st.text(max_size=8))
    def check(words: list[str], noise: str) -> None:
        obs = e.step(SqlAction(query=" ".join(words) + noise))
        assert not obs.done
        assert len(obs.text.encode()) < 6000
        assert obs.segments[0].role == Role.WARNING

    check()
    assert "(1 row)" in q(e, "SELECT COUNT(*) FROM orders").text
