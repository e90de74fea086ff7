-- SmartRestaurant ("Aria"): the SQLite twin of schema_postgres.sql, same tables, columns and order.
-- SQLite has no timestamp or date type: times are TEXT 'YYYY-MM-DD HH:MM:SS' (dates 'YYYY-MM-DD'),
-- which sort and compare like PostgreSQL timestamps against the same string literals. Booleans
-- are 0/1 (SQLite reads TRUE/FALSE as 1/0, so `is_combo = TRUE` works on both engines).

CREATE TABLE app_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE categories (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    name_en    TEXT NOT NULL,
    sort_order INTEGER NOT NULL
);

CREATE TABLE menu_items (
    id           INTEGER PRIMARY KEY,
    category_id  INTEGER NOT NULL REFERENCES categories (id),
    name         TEXT NOT NULL UNIQUE,
    name_en      TEXT NOT NULL,
    price_vnd    INTEGER NOT NULL CHECK (price_vnd > 0),
    prep_time_m  INTEGER NOT NULL CHECK (prep_time_m >= 0),
    is_combo     BOOLEAN NOT NULL CHECK (is_combo IN (0, 1)),
    tax_rate_bps INTEGER NOT NULL CHECK (tax_rate_bps BETWEEN 0 AND 10000),
    is_active    BOOLEAN NOT NULL CHECK (is_active IN (0, 1)),
    launched_on  TEXT NOT NULL
);

CREATE TABLE tables (
    id       INTEGER PRIMARY KEY,
    table_no INTEGER NOT NULL UNIQUE,
    seats    INTEGER NOT NULL CHECK (seats > 0),
    zone     TEXT NOT NULL CHECK (zone IN ('HALL', 'GARDEN', 'TERRACE', 'VIP'))
);

CREATE TABLE customers (
    id           INTEGER PRIMARY KEY,
    full_name    TEXT NOT NULL,
    phone        TEXT NOT NULL UNIQUE,
    email        TEXT,
    loyalty_tier TEXT NOT NULL CHECK (loyalty_tier IN ('MEMBER', 'SILVER', 'GOLD')),
    joined_at    TEXT NOT NULL
);

CREATE TABLE orders (
    id             INTEGER PRIMARY KEY,
    order_code     TEXT NOT NULL UNIQUE,
    table_id       INTEGER REFERENCES tables (id),
    customer_id    INTEGER REFERENCES customers (id),
    channel        TEXT NOT NULL CHECK (channel IN ('DINE_IN', 'TAKEAWAY', 'DELIVERY')),
    status         TEXT NOT NULL CHECK (status IN ('COMPLETED', 'CANCELLED', 'IN_PROGRESS')),
    shift          TEXT NOT NULL CHECK (shift IN ('LUNCH', 'DINNER')),
    guest_count    INTEGER NOT NULL CHECK (guest_count > 0),
    opened_at      TEXT NOT NULL,
    closed_at      TEXT,
    payment_method TEXT CHECK (payment_method IN ('CASH', 'CARD', 'MOMO', 'VNPAY')),
    discount_vnd   INTEGER NOT NULL DEFAULT 0 CHECK (discount_vnd >= 0),
    cancel_reason  TEXT
);

CREATE TABLE order_items (
    id             INTEGER PRIMARY KEY,
    order_id       INTEGER NOT NULL REFERENCES orders (id),
    menu_item_id   INTEGER NOT NULL REFERENCES menu_items (id),
    parent_item_id INTEGER REFERENCES order_items (id),
    quantity       INTEGER NOT NULL CHECK (quantity > 0),
    unit_price     INTEGER NOT NULL CHECK (unit_price >= 0),
    course         TEXT NOT NULL CHECK (course IN ('appetizer', 'main', 'dessert', 'drink')),
    note           TEXT
);

CREATE TABLE kitchen_tickets (
    id            INTEGER PRIMARY KEY,
    order_item_id INTEGER NOT NULL REFERENCES order_items (id),
    station       TEXT NOT NULL CHECK (station IN ('HOT', 'GRILL', 'COLD', 'PASTRY', 'BAR')),
    fired_at      TEXT NOT NULL,
    ready_at      TEXT,
    served_at     TEXT
);

CREATE TABLE inventory_logs (
    id         INTEGER PRIMARY KEY,
    ingredient TEXT NOT NULL,
    unit       TEXT NOT NULL CHECK (unit IN ('g', 'ml', 'pcs')),
    delta      INTEGER NOT NULL,
    reason     TEXT NOT NULL CHECK (reason IN ('RESTOCK', 'USAGE', 'WASTE', 'ADJUST')),
    logged_at  TEXT NOT NULL
);

CREATE INDEX orders_opened_at_idx ON orders (opened_at);
CREATE INDEX orders_customer_idx ON orders (customer_id);
CREATE INDEX order_items_order_idx ON order_items (order_id);
CREATE INDEX order_items_menu_item_idx ON order_items (menu_item_id);
CREATE INDEX kitchen_tickets_item_idx ON kitchen_tickets (order_item_id);
CREATE INDEX inventory_logs_ingredient_idx ON inventory_logs (ingredient, logged_at);
