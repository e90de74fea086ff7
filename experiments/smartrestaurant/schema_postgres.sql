-- SmartRestaurant ("Aria"): the PostgreSQL schema, the paper's section 8 application.
-- Ids are plain integers (not identity columns) because the generator assigns them, so that the
-- same seed gives the same ids on SQLite and PostgreSQL. Money is whole VND (no minor unit).
-- Timestamps are local restaurant time (Asia/Ho_Chi_Minh) at minute resolution, without zone.

CREATE TABLE app_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE categories (
    id         integer PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    name_en    text NOT NULL,
    sort_order integer NOT NULL
);

CREATE TABLE menu_items (
    id           integer PRIMARY KEY,
    category_id  integer NOT NULL REFERENCES categories (id),
    name         text NOT NULL UNIQUE,
    name_en      text NOT NULL,
    price_vnd    integer NOT NULL CHECK (price_vnd > 0),
    prep_time_m  integer NOT NULL CHECK (prep_time_m >= 0),
    is_combo     boolean NOT NULL,
    tax_rate_bps integer NOT NULL CHECK (tax_rate_bps BETWEEN 0 AND 10000),
    is_active    boolean NOT NULL,
    launched_on  date NOT NULL
);

CREATE TABLE tables (
    id       integer PRIMARY KEY,
    table_no integer NOT NULL UNIQUE,
    seats    integer NOT NULL CHECK (seats > 0),
    zone     text NOT NULL CHECK (zone IN ('HALL', 'GARDEN', 'TERRACE', 'VIP'))
);

CREATE TABLE customers (
    id           integer PRIMARY KEY,
    full_name    text NOT NULL,
    phone        text NOT NULL UNIQUE,
    email        text,
    loyalty_tier text NOT NULL CHECK (loyalty_tier IN ('MEMBER', 'SILVER', 'GOLD')),
    joined_at    timestamp NOT NULL
);

CREATE TABLE orders (
    id             integer PRIMARY KEY,
    order_code     text NOT NULL UNIQUE,
    table_id       integer REFERENCES tables (id),
    customer_id    integer REFERENCES customers (id),
    channel        text NOT NULL CHECK (channel IN ('DINE_IN', 'TAKEAWAY', 'DELIVERY')),
    status         text NOT NULL CHECK (status IN ('COMPLETED', 'CANCELLED', 'IN_PROGRESS')),
    shift          text NOT NULL CHECK (shift IN ('LUNCH', 'DINNER')),
    guest_count    integer NOT NULL CHECK (guest_count > 0),
    opened_at      timestamp NOT NULL,
    closed_at      timestamp,
    payment_method text CHECK (payment_method IN ('CASH', 'CARD', 'MOMO', 'VNPAY')),
    discount_vnd   integer NOT NULL DEFAULT 0 CHECK (discount_vnd >= 0),
    cancel_reason  text
);

CREATE TABLE order_items (
    id             integer PRIMARY KEY,
    order_id       integer NOT NULL REFERENCES orders (id),
    menu_item_id   integer NOT NULL REFERENCES menu_items (id),
    parent_item_id integer REFERENCES order_items (id),
    quantity       integer NOT NULL CHECK (quantity > 0),
    unit_price     integer NOT NULL CHECK (unit_price >= 0),
    course         text NOT NULL CHECK (course IN ('appetizer', 'main', 'dessert', 'drink')),
    note           text
);

CREATE TABLE kitchen_tickets (
    id            integer PRIMARY KEY,
    order_item_id integer NOT NULL REFERENCES order_items (id),
    station       text NOT NULL CHECK (station IN ('HOT', 'GRILL', 'COLD', 'PASTRY', 'BAR')),
    fired_at      timestamp NOT NULL,
    ready_at      timestamp,
    served_at     timestamp
);

CREATE TABLE inventory_logs (
    id         integer PRIMARY KEY,
    ingredient text NOT NULL,
    unit       text NOT NULL CHECK (unit IN ('g', 'ml', 'pcs')),
    delta      integer NOT NULL,
    reason     text NOT NULL CHECK (reason IN ('RESTOCK', 'USAGE', 'WASTE', 'ADJUST')),
    logged_at  timestamp NOT NULL
);

CREATE INDEX orders_opened_at_idx ON orders (opened_at);
CREATE INDEX orders_customer_idx ON orders (customer_id);
CREATE INDEX order_items_order_idx ON order_items (order_id);
CREATE INDEX order_items_menu_item_idx ON order_items (menu_item_id);
CREATE INDEX kitchen_tickets_item_idx ON kitchen_tickets (order_item_id);
CREATE INDEX inventory_logs_ingredient_idx ON inventory_logs (ingredient, logged_at);
