"""Database generation: one seed -> one in-memory SQLite sales database (``sqlite3`` stdlib).

Six related tables (customers, employees, suppliers, products, orders, order_items; a few thousand rows in all)
drawn from one ``random.Random(seed)``: different seeds give different people, catalogues, prices, dates and
volumes, so every held-out seed is an unseen database. Generation is pure (no clock, no randomness elsewhere).
"""

from __future__ import annotations

import random
import sqlite3
from datetime import date, timedelta
from itertools import accumulate

SCHEMA = """
CREATE TABLE customers (
    customer_id  INTEGER PRIMARY KEY,
    first_name   TEXT NOT NULL,
    last_name    TEXT NOT NULL,
    email        TEXT NOT NULL UNIQUE,
    country      TEXT NOT NULL,
    city         TEXT NOT NULL,
    segment      TEXT NOT NULL CHECK (segment IN ('consumer', 'corporate', 'small_business')),
    signup_date  TEXT NOT NULL
);
CREATE TABLE employees (
    employee_id  INTEGER PRIMARY KEY,
    first_name   TEXT NOT NULL,
    last_name    TEXT NOT NULL,
    title        TEXT NOT NULL,
    region       TEXT NOT NULL,
    manager_id   INTEGER REFERENCES employees(employee_id),
    hire_date    TEXT NOT NULL,
    salary       INTEGER NOT NULL
);
CREATE TABLE suppliers (
    supplier_id  INTEGER PRIMARY KEY,
    name         TEXT NOT NULL,
    country      TEXT NOT NULL
);
CREATE TABLE products (
    product_id   INTEGER PRIMARY KEY,
    name         TEXT NOT NULL UNIQUE,
    category     TEXT NOT NULL,
    supplier_id  INTEGER NOT NULL REFERENCES suppliers(supplier_id),
    unit_price   REAL NOT NULL,
    discontinued INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE orders (
    order_id     INTEGER PRIMARY KEY,
    customer_id  INTEGER NOT NULL REFERENCES customers(customer_id),
    employee_id  INTEGER NOT NULL REFERENCES employees(employee_id),
    order_date   TEXT NOT NULL,
    ship_date    TEXT,
    status       TEXT NOT NULL CHECK (status IN ('processing', 'shipped', 'delivered', 'cancelled', 'returned')),
    freight      REAL NOT NULL
);
CREATE TABLE order_items (
    order_id     INTEGER NOT NULL REFERENCES orders(order_id),
    product_id   INTEGER NOT NULL REFERENCES products(product_id),
    quantity     INTEGER NOT NULL CHECK (quantity > 0),
    unit_price   REAL NOT NULL,
    discount     REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (order_id, product_id)
);
CREATE INDEX idx_orders_customer ON orders(customer_id);
CREATE INDEX idx_orders_date ON orders(order_date);
CREATE INDEX idx_items_product ON order_items(product_id);
"""

FIRST = (
    "Ada",
    "Bruno",
    "Chloe",
    "Diego",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jonas",
    "Kira",
    "Liam",
    "Maya",
    "Nils",
    "Olga",
    "Pavel",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
    "Umar",
    "Vera",
    "Wen",
    "Ximena",
    "Yusuf",
    "Zoe",
    "Anton",
    "Bea",
    "Carlos",
    "Dana",
    "Emil",
    "Fatima",
    "Goran",
    "Hana",
    "Ivo",
    "Jana",
    "Karim",
    "Lucia",
)
LAST = (
    "Novak",
    "Schmidt",
    "Garcia",
    "Rossi",
    "Dubois",
    "Kowalski",
    "Andersen",
    "Tanaka",
    "Silva",
    "Ivanova",
    "Okafor",
    "Haddad",
    "Larsen",
    "Moreau",
    "Nakamura",
    "Petrov",
    "Quist",
    "Romero",
    "Sato",
    "Toth",
    "Ueda",
    "Varga",
    "Weber",
    "Yilmaz",
    "Zhang",
    "Bauer",
    "Costa",
    "Fischer",
    "Horvat",
    "Jensen",
    "Kim",
    "Lopez",
)
CITIES = {
    "Germany": ("Berlin", "Hamburg", "Munich", "Cologne", "Leipzig"),
    "France": ("Paris", "Lyon", "Marseille", "Toulouse", "Lille"),
    "Spain": ("Madrid", "Barcelona", "Valencia", "Seville"),
    "Italy": ("Rome", "Milan", "Turin", "Naples", "Bologna"),
    "Poland": ("Warsaw", "Krakow", "Gdansk", "Wroclaw"),
    "Japan": ("Tokyo", "Osaka", "Nagoya", "Sapporo"),
    "Brazil": ("Sao Paulo", "Rio de Janeiro", "Curitiba", "Recife"),
    "Canada": ("Toronto", "Montreal", "Vancouver", "Calgary"),
    "USA": ("Chicago", "Austin", "Denver", "Seattle", "Boston", "Atlanta"),
    "Norway": ("Oslo", "Bergen", "Trondheim"),
}
CATEGORIES = {
    "Beverages": ("Coffee", "Tea", "Cola", "Juice", "Water", "Lemonade"),
    "Snacks": ("Chips", "Pretzels", "Cookies", "Granola Bar", "Crackers"),
    "Dairy": ("Milk", "Yogurt", "Cheese", "Butter", "Cream"),
    "Bakery": ("Bagel", "Croissant", "Sourdough", "Muffin", "Baguette"),
    "Household": ("Detergent", "Sponge", "Trash Bags", "Paper Towels", "Dish Soap"),
    "Electronics": ("Charger", "Cable", "Earbuds", "Power Bank", "Adapter"),
    "Stationery": ("Notebook", "Pen Set", "Stapler", "Marker", "Folder"),
}
ADJ = ("Classic", "Organic", "Premium", "Daily", "Extra", "Mini", "Family", "Eco", "Ultra", "Smart", "Golden", "Fresh")
SUPPLIER_WORDS = (
    "Northwind",
    "Bluefield",
    "Crestline",
    "Dunmore",
    "Evergreen",
    "Foxglove",
    "Granite",
    "Harbor",
    "Ironwood",
    "Juniper",
    "Kestrel",
    "Lakeside",
)
TITLES = ("Sales Representative", "Senior Sales Representative", "Account Manager")
REGIONS = ("North", "South", "East", "West", "Central")
STATUSES = ("delivered", "delivered", "delivered", "shipped", "processing", "cancelled", "returned")


def _day(d: date) -> str:
    return d.isoformat()


def generate_database(seed: int) -> sqlite3.Connection:
    """A fresh in-memory database for ``seed`` (autocommit mode, not yet guarded)."""
    r = random.Random(seed)
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.executescript(SCHEMA)
    countries = r.sample(sorted(CITIES), r.randrange(5, 9))
    start = date(2021, 1, 1) + timedelta(days=r.randrange(0, 500))
    span_days = r.randrange(700, 1100)

    # employees: a head of sales, regional managers, representatives
    n_emp = r.randrange(12, 26)
    used_names: set[tuple[str, str]] = set()

    def person() -> tuple[str, str]:
        while True:
            p = (r.choice(FIRST), r.choice(LAST))
            if p not in used_names:
                used_names.add(p)
                return p

    employees: list[tuple[int, str, str, str, str, int | None, str, int]] = []
    managers: list[int] = []
    for eid in range(1, n_emp + 1):
        fn, ln = person()
        if eid == 1:
            title, mgr, region = "Head of Sales", None, "Central"
        elif eid <= 1 + max(2, n_emp // 6):
            title, mgr, region = "Regional Manager", 1, REGIONS[(eid - 2) % len(REGIONS)]
            managers.append(eid)
        else:
            title, mgr = r.choice(TITLES), r.choice(managers)
            region = employees[mgr - 1][4]
        hire = start - timedelta(days=r.randrange(30, 2500))
        salary = {"Head of Sales": 140_000, "Regional Manager": 95_000}.get(title, 52_000) + r.randrange(0, 30) * 1000
        employees.append((eid, fn, ln, title, region, mgr, _day(hire), salary))
    conn.executemany("INSERT INTO employees VALUES (?,?,?,?,?,?,?,?)", employees)

    suppliers = [
        (i, f"{w} {r.choice(('Foods', 'Trading', 'Supply', 'Goods', 'Wholesale'))}", r.choice(countries))
        for i, w in enumerate(r.sample(SUPPLIER_WORDS, r.randrange(5, 10)), 1)
    ]
    conn.executemany("INSERT INTO suppliers VALUES (?,?,?)", suppliers)

    products: list[tuple[int, str, str, int, float, int]] = []
    names: set[str] = set()
    for cat in r.sample(sorted(CATEGORIES), r.randrange(4, 8)):
        for _ in range(r.randrange(6, 14)):
            for _attempt in range(20):
                name = f"{r.choice(ADJ)} {r.choice(CATEGORIES[cat])}"
                if r.random() < 0.4:
                    name += f" {r.choice(('250g', '500g', '1L', 'XL', 'Pack of 6', 'Pro', 'Lite'))}"
                if name not in names:
                    break
            else:
                continue
            names.add(name)
            base = {"Electronics": 25.0, "Household": 6.0, "Stationery": 4.0}.get(cat, 3.0)
            price = round(base * r.uniform(0.5, 4.0), 2)
            products.append(
                (len(products) + 1, name, cat, r.choice(suppliers)[0], price, 1 if r.random() < 0.08 else 0)
            )
    conn.executemany("INSERT INTO products VALUES (?,?,?,?,?,?)", products)

    customers = []
    emails: set[str] = set()
    for cid in range(1, r.randrange(150, 320)):
        fn, ln = r.choice(FIRST), r.choice(LAST)
        email = f"{fn.lower()}.{ln.lower()}{cid}@example.{r.choice(('com', 'net', 'org'))}"
        country = r.choice(countries)
        customers.append(
            (
                cid,
                fn,
                ln,
                email,
                country,
                r.choice(CITIES[country]),
                r.choices(("consumer", "corporate", "small_business"), (5, 2, 3))[0],
                _day(start + timedelta(days=r.randrange(-400, span_days // 2))),
            )
        )
        emails.add(email)
    conn.executemany("INSERT INTO customers VALUES (?,?,?,?,?,?,?,?)", customers)

    reps = [e[0] for e in employees if e[3] in TITLES]
    active = [c for c in customers if r.random() < 0.88]  # some customers never order
    cum_w = list(accumulate(r.paretovariate(1.6) for _ in active))
    orders, items = [], []
    popular = [p for p in products if not p[5]]
    pop_cum = list(accumulate(r.paretovariate(1.3) for _ in popular))
    for oid in range(1, r.randrange(600, 1200)):
        c = r.choices(active, cum_weights=cum_w)[0]
        od = max(date.fromisoformat(c[7]), start) + timedelta(days=r.randrange(0, span_days))
        od = min(od, start + timedelta(days=span_days))
        status = r.choice(STATUSES)
        ship = (
            None
            if status in ("processing", "cancelled")
            else _day(od + timedelta(days=r.choices(range(15), (3, 8, 9, 8, 6, 4, 3, 2, 2, 1, 1, 1, 1, 1, 1))[0]))
        )
        orders.append((oid, c[0], r.choice(reps), _day(od), ship, status, round(r.uniform(2, 80), 2)))
        for p in {x[0]: x for x in r.choices(popular, cum_weights=pop_cum, k=r.randrange(1, 6))}.values():
            disc = r.choice((0.0, 0.0, 0.0, 0.05, 0.1, 0.15, 0.2))
            price = round(p[4] * r.choice((1.0, 1.0, 0.95, 1.05)), 2)
            items.append((oid, p[0], r.randrange(1, 12), price, disc))
    conn.executemany("INSERT INTO orders VALUES (?,?,?,?,?,?,?)", orders)
    conn.executemany("INSERT INTO order_items VALUES (?,?,?,?,?)", items)
    return conn


TABLES = ("customers", "employees", "suppliers", "products", "orders", "order_items")


def schema_summary(conn: sqlite3.Connection) -> str:
    """``table(col type, ...)`` lines for the task statement."""
    out = []
    for t in TABLES:
        cols = conn.execute(f"PRAGMA table_info({t})").fetchall()
        out.append(f"  {t}(" + ", ".join(f"{c[1]} {c[2]}" for c in cols) + ")")
    return "\n".join(out)
