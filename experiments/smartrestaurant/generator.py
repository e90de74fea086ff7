"""A deterministic generator of three months of the Aria restaurant's activity.

``generate(seed)`` simulates every service from FIRST_DAY to the pinned REFERENCE_NOW: arrivals with
lunch and dinner peaks, seating on free tables, what each party orders (combos, favourite dishes of
returning customers), kitchen tickets whose cook times stretch at the peaks, cancellations, and the
inventory those sales consume. Events later than "now" are cut, so the last lunch is still running:
some orders are IN_PROGRESS and some tickets not yet ready or served. Two of those are scripted, so
the paper's "how long has table 5 waited" and "who has waited longest" have fixed answers.

Only ``random.Random(seed)`` draws numbers and every collection is walked in a fixed order, so the
same seed gives the same rows, and ``write_sqlite`` the same bytes.
"""
from __future__ import annotations

import math
import os
import random
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, timedelta
from itertools import accumulate
from pathlib import Path

from reflect_sql.experiments.smartrestaurant import menu
from reflect_sql.experiments.smartrestaurant.menu import DISH_BY_ID, DISHES, REFERENCE_NOW
from reflect_sql.files import atomic_file

HERE = Path(__file__).resolve().parent
SCHEMA_SQLITE = HERE / "schema_sqlite.sql"
SCHEMA_POSTGRES = HERE / "schema_postgres.sql"

# Load order: parents before children, so declared foreign keys hold row by row.
TABLE_ORDER = ["app_meta", "categories", "menu_items", "tables", "customers", "orders", "order_items",
               "kitchen_tickets", "inventory_logs"]

# Bump when a change to this file changes the data: ensure_demo_db then rebuilds stale files.
GENERATOR_VERSION = "1"
N_CUSTOMERS = 2600
LUNCH_OPEN, LUNCH_LAST, LUNCH_PEAK = 10 * 60 + 30, 13 * 60 + 45, 12 * 60 + 5
DINNER_OPEN, DINNER_LAST, DINNER_PEAK = 17 * 60, 21 * 60 + 30, 19 * 60
MAX_COOK_M = 38  # with at most 4 minutes to serve, anything fired 42+ minutes ago has been served
MAX_SERVE_M = 4

_FIRST = date.fromisoformat(menu.FIRST_DAY)
_NOW_DAY = (date.fromisoformat(REFERENCE_NOW[:10]) - _FIRST).days
NOW = _NOW_DAY * 1440 + int(REFERENCE_NOW[11:13]) * 60 + int(REFERENCE_NOW[14:16])
N_DAYS = _NOW_DAY + 1
_DAY_STR = [(_FIRST + timedelta(days=d)).isoformat() for d in range(N_DAYS + 1)]
_TS = [f"{d} {m // 60:02d}:{m % 60:02d}:00" for d in _DAY_STR for m in range(1440)]


def ts(minute: int | None) -> str | None:
    """Minutes since FIRST_DAY 00:00 -> 'YYYY-MM-DD HH:MM:00' (the data keeps minute resolution)."""
    return None if minute is None else _TS[minute]


def day_index(iso_day: str) -> int:
    return (date.fromisoformat(iso_day) - _FIRST).days


_SUP_CUA_LAST = day_index(menu.SUP_CUA_LAST_DAY)
_COMBO_GIA_DINH_LAST = day_index(menu.COMBO_GIA_DINH_LAST_DAY)
_PRICE_RISE = day_index(menu.PRICE_RISE_DAY)
_HOTPOTS = [d.id for d in DISHES if d.category_id == 4]
_HOTPOT_WEIGHTS = [d.popularity for d in DISHES if d.category_id == 4]


@dataclass
class Line:
    dish_id: int
    quantity: int
    unit_price: int
    course: str
    parent: int | None = None  # index of the combo line this part belongs to
    note: str | None = None
    ticket: list[int | None] | None = None  # [fired, ready, served], minutes; None: never fired


@dataclass
class Order:
    opened: int
    seq: int  # tie-break for orders opened in the same minute
    channel: str
    guests: int
    customer: int | None  # customer index before ids are assigned
    lines: list[Line] = field(default_factory=list)
    table_no: int | None = None
    status: str = "COMPLETED"
    closed: int | None = None
    payment: str | None = None
    cancel_reason: str | None = None


def _available(dish_id: int, day: int) -> bool:
    if dish_id == 6:
        return day <= _SUP_CUA_LAST
    if dish_id == 45:
        return day <= _COMBO_GIA_DINH_LAST
    return DISH_BY_ID[dish_id].popularity > 0


def _price(dish_id: int, day: int) -> int:
    if dish_id == 7 and day < _PRICE_RISE:
        return menu.PHO_BO_OLD_PRICE
    return DISH_BY_ID[dish_id].price_vnd


class _Simulator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seq = 0
        self._menus: dict[tuple, tuple[list[int], list[float]]] = {}
        self._combos = {
            still_sold: ([d.id for d in DISHES if d.components and (d.is_active or still_sold)],
                         [d.popularity for d in DISHES if d.components and (d.is_active or still_sold)])
            for still_sold in (False, True)
        }
        rng = self.rng
        # Returning customers: a few regulars carry much of the traffic (Zipf-like weights).
        self.customer_cum_weights = list(accumulate(1.0 / (k + 60) ** 0.9 for k in range(N_CUSTOMERS)))
        # Roasted milk tea is the house favourite that regulars come back for.
        fav_pool = [d.id for d in DISHES if d.popularity > 0 and not d.components]
        fav_weights = [DISH_BY_ID[i].popularity * (6.0 if i == 37 else 1.0) for i in fav_pool]
        self.favourites = [
            sorted(set(rng.choices(fav_pool, fav_weights, k=rng.choice((1, 1, 2, 3)))))
            for _ in range(N_CUSTOMERS)
        ]

    def pick(self, course: str, day: int, dinner: bool) -> int:
        # The menu changes on two days only, so the weighted candidate lists are few: cache them.
        key = (course, dinner, day <= _SUP_CUA_LAST, day <= _COMBO_GIA_DINH_LAST)
        if key not in self._menus:
            candidates, cum, acc = [], [], 0.0
            for d in DISHES:
                if d.course != course or d.components or not _available(d.id, day):
                    continue
                w = d.popularity
                if dinner and d.category_id in (4, 5):
                    w *= 2.0
                if dinner and d.id in (34, 35):
                    w *= 2.5
                if not dinner and d.category_id in (2, 3):
                    w *= 1.5
                if not dinner and d.id in (28, 29, 30):
                    w *= 1.8
                acc += w
                candidates.append(d.id)
                cum.append(acc)
            self._menus[key] = (candidates, cum)
        candidates, cum = self._menus[key]
        return self.rng.choices(candidates, cum_weights=cum)[0]

    def order_lines(self, o: Order, day: int, dinner: bool) -> list[Line]:
        rng = self.rng
        portions: dict[tuple[int, str], int] = defaultdict(int)
        combos: dict[int, int] = defaultdict(int)
        hotpots = 0
        if o.channel == "DINE_IN" and o.guests >= 2 and rng.random() < (0.30 if dinner else 0.12):
            hotpots = max(1, round(o.guests / 4))
        combo_ids, combo_w = self._combos[day <= _COMBO_GIA_DINH_LAST]
        for _ in range(o.guests):
            if rng.random() < 0.13:
                cid = rng.choices(combo_ids, combo_w)[0]
                if cid == 44 and o.guests < 3:
                    cid = 41
                combos[cid] += 1
                continue
            if not (hotpots and rng.random() < 0.8) and rng.random() < 0.93:
                portions[(self.pick("main", day, dinner), "main")] += 1
            if rng.random() < 0.82:
                portions[(self.pick("drink", day, dinner), "drink")] += 1
            if o.channel == "DINE_IN" and rng.random() < 0.22:
                portions[(self.pick("dessert", day, dinner), "dessert")] += 1
        for _ in range(hotpots):
            portions[(rng.choices(_HOTPOTS, _HOTPOT_WEIGHTS)[0], "main")] += 1
        if o.channel == "DINE_IN":
            for _ in range(max(1, o.guests // 2)):
                if rng.random() < 0.55:
                    dish = self.pick("appetizer", day, dinner)
                    # A lone diner sometimes makes a meal of a starter.
                    course = "main" if o.guests == 1 and rng.random() < 0.3 else "appetizer"
                    portions[(dish, course)] += 1
        if o.customer is not None:
            for fav in self.favourites[o.customer]:
                # Regulars who love the roasted milk tea hardly ever skip it.
                if _available(fav, day) and rng.random() < (0.8 if fav == 37 else 0.45):
                    portions[(fav, DISH_BY_ID[fav].course)] += 1

        lines: list[Line] = []
        for cid in sorted(combos):
            n = combos[cid]
            lines.append(Line(cid, n, _price(cid, day), "main"))
            parent = len(lines) - 1
            for part, qty in DISH_BY_ID[cid].components:
                lines.append(Line(part, qty * n, 0, DISH_BY_ID[part].course, parent=parent))
        for (dish, course) in sorted(portions):
            lines.append(Line(dish, portions[(dish, course)], _price(dish, day), course))
        for line in lines:
            if line.parent is None and DISH_BY_ID[line.dish_id].components == () and rng.random() < 0.06:
                line.note = rng.choice(menu.ITEM_NOTES)
        return lines

    def cook(self, dish_id: int, fired: int) -> int:
        """Cook time stretches near the peaks, when the kitchen is loaded."""
        minute = fired % 1440
        load = 1 + 0.35 * math.exp(-(((minute - LUNCH_PEAK) / 40) ** 2)) + 0.4 * math.exp(
            -(((minute - DINNER_PEAK) / 50) ** 2)
        )
        m = DISH_BY_ID[dish_id].prep_time_m * load * self.rng.lognormvariate(0, 0.22)
        return max(1, min(MAX_COOK_M, round(m)))

    def timeline(self, o: Order) -> None:
        """Fire, cook and serve every ticketed line; then close (or cancel) the order."""
        rng = self.rng
        t0 = o.opened
        dine_in = o.channel == "DINE_IN"
        offsets = {"drink": (1, 4), "appetizer": (2, 6), "main": (6, 14)}
        last_served = t0
        for line in o.lines:
            if DISH_BY_ID[line.dish_id].components or line.course == "dessert":
                continue
            lo, hi = offsets[line.course]
            fired = t0 + rng.randint(lo, hi)
            ready = fired + self.cook(line.dish_id, fired)
            served = ready + rng.randint(0, MAX_SERVE_M)
            line.ticket = [fired, ready, served]
            last_served = max(last_served, served)
        for line in o.lines:
            if line.course == "dessert":
                fired = last_served + rng.randint(5, 20)
                ready = fired + self.cook(line.dish_id, fired)
                line.ticket = [fired, ready, ready + rng.randint(0, MAX_SERVE_M)]
        done = max([ln.ticket[2] for ln in o.lines if ln.ticket] or [t0 + 5])
        o.closed = done + (rng.randint(10, 30) if dine_in else rng.randint(1, 5))

        peak = abs(t0 % 1440 - LUNCH_PEAK) < 30 or abs(t0 % 1440 - DINNER_PEAK) < 40
        if rng.random() < (0.055 if peak else 0.03):
            o.status = "CANCELLED"
            o.cancel_reason = rng.choice(menu.CANCEL_REASONS if peak else menu.CANCEL_REASONS[:1] + menu.CANCEL_REASONS[2:])
            o.closed = t0 + rng.randint(1, 25)
            for line in o.lines:
                _cut(line, o.closed)
        else:
            o.payment = rng.choices(["CASH", "CARD", "MOMO", "VNPAY"], [35, 25, 28, 12])[0]

    def arrivals(self, day: int, dinner: bool) -> list[int]:
        rng = self.rng
        weekend = (_FIRST + timedelta(days=day)).weekday() >= 5
        base = (134 if weekend else 106) if dinner else (110 if weekend else 101)
        trend = 1 + 0.10 * day / N_DAYS
        n = max(20, round(base * trend * rng.uniform(0.88, 1.12)))
        lo, hi, peak, sd = (DINNER_OPEN, DINNER_LAST, DINNER_PEAK, 55) if dinner else (LUNCH_OPEN, LUNCH_LAST, LUNCH_PEAK, 38)
        out = []
        while len(out) < n:
            m = round(rng.gauss(peak, sd))
            if lo <= m <= hi:
                out.append(day * 1440 + m)
        return sorted(out)

    def new_order(self, opened: int) -> Order:
        rng = self.rng
        channel = rng.choices(["DINE_IN", "TAKEAWAY", "DELIVERY"], [80, 12, 8])[0]
        if channel == "DINE_IN":
            guests = rng.choices([1, 2, 3, 4, 5, 6, 7, 8, 10], [10, 34, 15, 22, 7, 6, 2, 3, 1])[0]
        else:
            guests = rng.choices([1, 2, 3], [70, 22, 8])[0]
        p_known = {"DINE_IN": 0.52, "TAKEAWAY": 0.4, "DELIVERY": 1.0}[channel]
        customer = None
        if rng.random() < p_known:
            customer = rng.choices(range(N_CUSTOMERS), cum_weights=self.customer_cum_weights)[0]
        self.seq += 1
        return Order(opened, self.seq, channel, guests, customer)


def _cut(line: Line, at: int) -> None:
    """Forget what happens after ``at``: not fired -> no ticket; not yet ready/served -> NULL."""
    if line.ticket is None:
        return
    fired, ready, served = line.ticket
    if fired > at:
        line.ticket = None
        return
    line.ticket = [fired, ready if ready is not None and ready <= at else None,
                   served if served is not None and served <= at else None]


class _Floor:
    """Which dining table is free when; a party takes the smallest free table that seats it."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.busy: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.seats = {no: seats for no, seats, _ in menu.DINING_TABLES}

    def free(self, table_no: int, start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in self.busy[table_no])

    def reserve(self, table_no: int, start: int, end: int) -> None:
        self.busy[table_no].append((start, end))

    def seat(self, guests: int, start: int, end: int) -> int | None:
        fitting = sorted((seats, no) for no, seats in self.seats.items() if seats >= guests)
        for limit in (guests + 4, 99):
            options = [(s, no) for s, no in fitting if s <= limit and self.free(no, start, end)]
            if options:
                smallest = options[0][0]
                no = self.rng.choice([no for s, no in options if s == smallest])
                self.reserve(no, start, end)
                return no
        return None


def _scripted_orders(sim: _Simulator) -> list[Order]:
    """Two parties of the running lunch whose waits the paper's questions ask about."""
    day = _NOW_DAY * 1440

    def at(hhmm: str) -> int:
        return day + int(hhmm[:2]) * 60 + int(hhmm[3:])

    def line(dish: int, qty: int, course: str, fired: str, ready: str | None, served: str | None) -> Line:
        t = [at(fired), at(ready) if ready else None, at(served) if served else None]
        return Line(dish, qty, _price(dish, _NOW_DAY), course, ticket=t)

    # Table 5: its spring rolls were fired at 12:17 and have not come out: 23 minutes at 12:40.
    sim.seq += 1
    t5 = Order(at("12:14"), sim.seq, "DINE_IN", 3, 0, table_no=5, status="IN_PROGRESS")
    t5.lines = [
        line(1, 2, "appetizer", "12:17", None, None),
        line(7, 1, "main", "12:24", "12:37", "12:39"),
        line(9, 2, "main", "12:24", None, None),
        line(31, 3, "drink", "12:15", "12:16", "12:18"),
    ]
    # Table 12: the Thai hotpot fired at 11:58 is stuck (42 minutes), the longest food wait now.
    sim.seq += 1
    t12 = Order(at("11:52"), sim.seq, "DINE_IN", 4, None, table_no=12, status="IN_PROGRESS")
    t12.lines = [
        line(2, 1, "appetizer", "11:56", "12:05", "12:07"),
        line(17, 1, "main", "11:58", None, None),
        line(34, 2, "drink", "11:54", "11:55", "11:57"),
        line(37, 2, "drink", "11:54", "11:59", "12:01"),
    ]
    return [t5, t12]


def _simulate(seed: int) -> tuple[list[Order], _Simulator]:
    sim = _Simulator(seed)
    rng = sim.rng
    orders: list[Order] = []
    for day in range(N_DAYS):
        floor = _Floor(rng)
        if day == _NOW_DAY:
            for o in _scripted_orders(sim):
                floor.reserve(o.table_no, o.opened, 10 ** 9)
                orders.append(o)
        for dinner in (False, True):
            for opened in sim.arrivals(day, dinner):
                if opened > NOW:
                    continue
                o = sim.new_order(opened)
                o.lines = sim.order_lines(o, day, dinner)
                sim.timeline(o)
                if o.channel == "DINE_IN":
                    o.table_no = floor.seat(o.guests, o.opened, o.closed)
                    if o.table_no is None:  # full house: the party leaves before ordering
                        continue
                if o.closed > NOW:
                    o.status, o.closed, o.payment, o.cancel_reason = "IN_PROGRESS", None, None, None
                    for line in o.lines:
                        _cut(line, NOW)
                orders.append(o)
    orders.sort(key=lambda o: (o.opened, o.seq))
    return orders, sim


def _inventory(rng: random.Random, orders: list[Order]) -> list[tuple]:
    """Nightly usage from the day's sales, restocks ahead of it, some waste, monthly stocktakes."""
    usage = [defaultdict(int) for _ in range(N_DAYS)]
    for o in orders:
        if o.status == "CANCELLED":
            continue
        day = o.opened // 1440
        for line in o.lines:
            for ingredient, amount in menu.RECIPES.get(line.dish_id, {}).items():
                usage[day][ingredient] += amount * line.quantity
    rows = []

    def log(ingredient: str, delta: int, reason: str, minute: int) -> None:
        if delta != 0 and minute <= NOW:
            rows.append((ingredient, menu.INGREDIENTS[ingredient][0], delta, reason, minute))

    def rounded(x: float, unit: str) -> int:
        step = 10 if unit == "pcs" else 100
        return max(step, int(round(x / step)) * step)

    for ingredient, (unit, every, _) in menu.INGREDIENTS.items():
        opening = sum(usage[d][ingredient] for d in range(3))
        log(ingredient, rounded(opening, unit), "ADJUST", 6 * 60 + 30)
    for day in range(N_DAYS):
        first_of_month = (_FIRST + timedelta(days=day)).day == 1
        for ingredient, (unit, every, perishable) in menu.INGREDIENTS.items():
            if first_of_month:
                log(ingredient, -rounded(usage[day - 1][ingredient] * rng.uniform(0.01, 0.04), unit), "ADJUST",
                    day * 1440 + 7 * 60)
            if day % every == 0:
                need = sum(usage[d][ingredient] for d in range(day, min(N_DAYS, day + every)))
                log(ingredient, rounded(need * rng.uniform(1.0, 1.15), unit), "RESTOCK",
                    day * 1440 + 7 * 60 + 30 + rng.randint(0, 50))
            if day < _NOW_DAY:
                log(ingredient, -usage[day][ingredient], "USAGE", day * 1440 + 22 * 60 + 45)
                if perishable and rng.random() < 0.3:
                    log(ingredient, -rounded(usage[day][ingredient] * rng.uniform(0.01, 0.05), unit), "WASTE",
                        day * 1440 + 22 * 60 + 50)
    rows.sort(key=lambda r: (r[4], r[0], r[3]))
    return [(i + 1, ing, unit, delta, reason, ts(m)) for i, (ing, unit, delta, reason, m) in enumerate(rows)]


def _customers(rng: random.Random, orders: list[Order]) -> tuple[list[tuple], dict[int, int], dict[int, str]]:
    """Customer rows, ids in order of joining, and each one's loyalty tier from their visits."""
    first_seen: dict[int, int] = {}
    visits: dict[int, int] = defaultdict(int)
    for o in orders:
        if o.customer is None:
            continue
        first_seen.setdefault(o.customer, o.opened)
        if o.status == "COMPLETED":
            visits[o.customer] += 1
    joined = {}
    for k in range(N_CUSTOMERS):
        if k in first_seen:
            # Many joined long before the data starts; the rest signed up on their first visit.
            before = rng.choice((0, 0, rng.randint(1, 600)))
            joined[k] = first_seen[k] - before * 1440 - rng.randint(0, 30)
        else:
            joined[k] = rng.randint(-500 * 1440, NOW - 1440)
    order_of = sorted(range(N_CUSTOMERS), key=lambda k: (joined[k], k))
    ids = {k: i + 1 for i, k in enumerate(order_of)}
    tiers = {k: "GOLD" if visits[k] >= 25 else "SILVER" if visits[k] >= 10 else "MEMBER" for k in range(N_CUSTOMERS)}
    phones = rng.sample(range(10 ** 7, 10 ** 8), N_CUSTOMERS)
    rows = []
    for k in order_of:
        name = " ".join((
            rng.choices(menu.FAMILY_NAMES, menu.FAMILY_WEIGHTS)[0],
            rng.choice(menu.MIDDLE_NAMES),
            rng.choice(menu.GIVEN_NAMES),
        ))
        phone = rng.choice(("090", "091", "093", "097", "098")) + f"{phones[ids[k] - 1]:08d}"[1:]
        email = None
        if rng.random() < 0.55:
            email = f"{_ascii(name.split()[-1])}.{_ascii(name.split()[0])}{ids[k]}@{rng.choice(('gmail.com', 'yahoo.com', 'outlook.com'))}"
        rows.append((ids[k], name, phone, email, tiers[k], _ts_signed(joined[k])))
    return rows, ids, tiers


def _ts_signed(minute: int) -> str:
    """Like ts() but also before FIRST_DAY."""
    day, rest = divmod(minute, 1440)
    d = _FIRST + timedelta(days=day)
    return f"{d.isoformat()} {rest // 60:02d}:{rest % 60:02d}:00"


_ASCII = str.maketrans("àáảãạăằắẳẵặâầấẩẫậèéẻẽẹêềếểễệìíỉĩịòóỏõọôồốổỗộơờớởỡợùúủũụưừứửữựỳýỷỹỵđ",
                       "aaaaaaaaaaaaaaaaaeeeeeeeeeeeiiiiiooooooooooooooooouuuuuuuuuuuyyyyyd")


def _ascii(word: str) -> str:
    return word.lower().translate(_ASCII)


def generate(seed: int = 0) -> dict[str, list[tuple]]:
    """Every table's rows, in column order of the schema files and in id order."""
    orders, sim = _simulate(seed)
    rng = sim.rng
    customers, cust_ids, tiers = _customers(rng, orders)
    table_ids = {no: i + 1 for i, (no, _, _) in enumerate(menu.DINING_TABLES)}

    order_rows, item_rows, ticket_rows = [], [], []
    per_day: dict[int, int] = defaultdict(int)
    for oid, o in enumerate(orders, start=1):
        day = o.opened // 1440
        per_day[day] += 1
        code = f"A{_DAY_STR[day][2:].replace('-', '')}-{per_day[day]:04d}"
        subtotal = sum(ln.quantity * ln.unit_price for ln in o.lines)
        discount = 0
        if o.status == "COMPLETED" and o.customer is not None:
            rate = {"GOLD": 0.10, "SILVER": 0.05, "MEMBER": 0.0}[tiers[o.customer]]
            discount = int(subtotal * rate) // 1000 * 1000
        shift = "LUNCH" if o.opened % 1440 < 16 * 60 else "DINNER"
        order_rows.append((
            oid, code, table_ids.get(o.table_no), cust_ids.get(o.customer), o.channel, o.status, shift,
            o.guests, ts(o.opened), ts(o.closed), o.payment, discount, o.cancel_reason,
        ))
        first_item_id = len(item_rows) + 1
        for line in o.lines:
            item_id = len(item_rows) + 1
            parent = None if line.parent is None else first_item_id + line.parent
            item_rows.append((item_id, oid, line.dish_id, parent, line.quantity, line.unit_price, line.course, line.note))
            if line.ticket is not None:
                fired, ready, served = line.ticket
                ticket_rows.append((len(ticket_rows) + 1, item_id, DISH_BY_ID[line.dish_id].station,
                                    ts(fired), ts(ready), ts(served)))

    menu_rows = [
        (d.id, d.category_id, d.name, d.name_en, d.price_vnd, d.prep_time_m, int(bool(d.components)),
         d.tax_rate_bps, int(d.is_active), d.launched_on)
        for d in DISHES
    ]
    meta = [
        ("reference_now", REFERENCE_NOW),
        ("restaurant_name", "Aria"),
        ("currency", "VND"),
        ("timezone", "Asia/Ho_Chi_Minh"),
        ("data_start", menu.FIRST_DAY),
        ("lunch_shift", "10:30-16:00"),
        ("dinner_shift", "16:00-23:00"),
        ("generator_seed", str(seed)),
        ("generator_version", GENERATOR_VERSION),
    ]
    return {
        "app_meta": meta,
        "categories": list(menu.CATEGORIES),
        "menu_items": menu_rows,
        "tables": [(i + 1, no, seats, zone) for i, (no, seats, zone) in enumerate(menu.DINING_TABLES)],
        "customers": customers,
        "orders": order_rows,
        "order_items": item_rows,
        "kitchen_tickets": ticket_rows,
        "inventory_logs": _inventory(rng, orders),
    }


def write_sqlite(path: str | os.PathLike, seed: int = 0) -> dict[str, int]:
    """Write the database to ``path`` (replacing it atomically) and return row counts per table.

    Built in a temporary file next to the target and renamed into place, so a reader never sees a
    half-written file and an existing database survives a failed run.
    """
    data = generate(seed)
    with atomic_file(path) as tmp:
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(SCHEMA_SQLITE.read_text(encoding="utf-8"))
            with conn:
                for table in TABLE_ORDER:
                    rows = data[table]
                    marks = ", ".join("?" * len(rows[0]))
                    conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            problems = conn.execute("PRAGMA foreign_key_check").fetchall()
            if problems:
                raise RuntimeError(f"generator produced dangling foreign keys: {problems[:5]}")
            conn.execute("ANALYZE")
            # A rebuilt file has one page layout for given content, whatever the insert history.
            conn.execute("VACUUM")
        finally:
            conn.close()
    return {table: len(data[table]) for table in TABLE_ORDER}
