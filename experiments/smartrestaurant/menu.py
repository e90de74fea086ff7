"""The fixed part of the Aria restaurant: categories, menu, dining tables, recipes, name pools.

Nothing here is random, so every id is stable across seeds; the glossary and the questions' gold
SQL may name them. The generator only decides who orders what and when.
"""
from __future__ import annotations

from dataclasses import dataclass

# The data's "now": a Wednesday lunch, mid-month, so "this month" is partial and "last month" whole.
REFERENCE_NOW = "2025-06-18 12:40:00"
FIRST_DAY = "2025-03-19"
# Phở bò's price rose on this day: revenue must use order_items.unit_price, not today's menu price.
PRICE_RISE_DAY = "2025-05-01"

# (id, name, name_en, sort_order)
CATEGORIES = [
    (1, "Khai vị", "Appetizers", 1),
    (2, "Phở & Bún", "Noodle soups", 2),
    (3, "Cơm", "Rice dishes", 3),
    (4, "Lẩu", "Hotpot", 4),
    (5, "Món nướng", "Grill", 5),
    (6, "Tráng miệng", "Desserts", 6),
    (7, "Đồ uống", "Drinks", 7),
    (8, "Trà sữa", "Milk tea", 8),
    (9, "Combo", "Combos", 9),
]


@dataclass(frozen=True)
class Dish:
    id: int
    category_id: int
    name: str
    name_en: str
    price_vnd: int
    prep_time_m: int
    course: str  # the course it is usually ordered as
    station: str | None  # kitchen station its ticket goes to; None for combos (their parts go)
    popularity: float  # relative weight within its course
    tax_rate_bps: int = 800  # Vietnam's reduced 8% VAT on food; beer pays 10%
    is_active: bool = True
    launched_on: str = "2024-01-15"
    components: tuple[tuple[int, int], ...] = ()  # combos: (menu_item_id, quantity)


DISHES = [
    Dish(1, 1, "Gỏi cuốn", "Fresh spring rolls", 55000, 6, "appetizer", "COLD", 3.0),
    Dish(2, 1, "Chả giò", "Fried spring rolls", 65000, 8, "appetizer", "HOT", 2.6),
    Dish(3, 1, "Nem nướng", "Grilled pork sausage", 75000, 10, "appetizer", "GRILL", 1.4),
    Dish(4, 1, "Gỏi ngó sen", "Lotus stem salad", 85000, 7, "appetizer", "COLD", 1.1),
    Dish(5, 1, "Bánh xèo", "Sizzling pancake", 90000, 12, "appetizer", "HOT", 1.7),
    Dish(6, 1, "Súp cua", "Crab soup", 60000, 8, "appetizer", "HOT", 0.9, is_active=False),
    Dish(7, 2, "Phở bò", "Beef pho", 70000, 9, "main", "HOT", 3.4),
    Dish(8, 2, "Phở gà", "Chicken pho", 60000, 9, "main", "HOT", 1.6),
    Dish(9, 2, "Bún chả", "Grilled pork with vermicelli", 70000, 12, "main", "GRILL", 2.5),
    Dish(10, 2, "Bún bò Huế", "Hue spicy beef noodle soup", 75000, 10, "main", "HOT", 1.9),
    Dish(11, 2, "Mì Quảng", "Quang-style turmeric noodles", 70000, 10, "main", "HOT", 1.0),
    Dish(12, 2, "Hủ tiếu Nam Vang", "Phnom Penh noodle soup", 70000, 9, "main", "HOT", 0.9),
    Dish(13, 3, "Cơm tấm sườn bì chả", "Broken rice with grilled pork chop", 75000, 11, "main", "GRILL", 2.8),
    Dish(14, 3, "Cơm gà Hội An", "Hoi An chicken rice", 70000, 9, "main", "HOT", 1.4),
    Dish(15, 3, "Cơm chiên hải sản", "Seafood fried rice", 85000, 10, "main", "HOT", 1.2),
    Dish(16, 3, "Cá kho tộ", "Caramelised fish in clay pot", 95000, 15, "main", "HOT", 0.8),
    Dish(17, 4, "Lẩu Thái", "Thai hotpot", 320000, 15, "main", "HOT", 2.2),
    Dish(18, 4, "Lẩu mắm", "Fermented fish hotpot", 350000, 16, "main", "HOT", 0.8),
    Dish(19, 4, "Lẩu gà lá é", "Chicken hotpot with e leaves", 300000, 15, "main", "HOT", 1.2),
    Dish(20, 5, "Bò lá lốt", "Beef in betel leaves", 95000, 12, "main", "GRILL", 1.3),
    Dish(21, 5, "Sườn nướng mật ong", "Honey-grilled ribs", 120000, 16, "main", "GRILL", 1.1),
    Dish(22, 5, "Tôm nướng muối ớt", "Chilli-salt grilled prawns", 160000, 14, "main", "GRILL", 0.7),
    Dish(23, 6, "Chè ba màu", "Three-colour sweet soup", 35000, 4, "dessert", "PASTRY", 2.0),
    Dish(24, 6, "Bánh flan", "Caramel flan", 30000, 3, "dessert", "PASTRY", 2.4),
    Dish(25, 6, "Chè khúc bạch", "Almond jelly sweet soup", 40000, 4, "dessert", "PASTRY", 1.2),
    Dish(26, 6, "Sữa chua nếp cẩm", "Yoghurt with black sticky rice", 35000, 3, "dessert", "COLD", 1.0),
    # Launched on the reference day itself: on the menu, never ordered (the LEFT JOIN trap).
    Dish(27, 6, "Bánh flan matcha", "Matcha flan", 38000, 3, "dessert", "PASTRY", 0.0, launched_on=REFERENCE_NOW[:10]),
    Dish(28, 7, "Cà phê sữa đá", "Iced milk coffee", 35000, 3, "drink", "BAR", 2.6),
    Dish(29, 7, "Cà phê đen", "Black coffee", 30000, 3, "drink", "BAR", 1.0),
    Dish(30, 7, "Bạc xỉu", "White coffee", 38000, 3, "drink", "BAR", 1.1),
    Dish(31, 7, "Trà đá", "Iced tea", 5000, 1, "drink", "BAR", 3.0),
    Dish(32, 7, "Nước dừa", "Coconut water", 40000, 2, "drink", "BAR", 1.2),
    Dish(33, 7, "Sinh tố bơ", "Avocado smoothie", 50000, 5, "drink", "BAR", 0.9),
    Dish(34, 7, "Bia Sài Gòn", "Saigon beer", 30000, 1, "drink", "BAR", 2.0, tax_rate_bps=1000),
    Dish(35, 7, "Bia 333", "333 beer", 28000, 1, "drink", "BAR", 1.2, tax_rate_bps=1000),
    Dish(36, 7, "Nước chanh dây", "Passion fruit juice", 40000, 3, "drink", "BAR", 0.9),
    Dish(37, 8, "Trà sữa nướng", "Roasted milk tea", 45000, 4, "drink", "BAR", 2.2),
    Dish(38, 8, "Trà sữa trân châu đường đen", "Brown sugar boba milk tea", 50000, 5, "drink", "BAR", 1.6),
    Dish(39, 8, "Trà đào cam sả", "Peach, orange and lemongrass tea", 45000, 4, "drink", "BAR", 1.5),
    Dish(40, 8, "Trà sữa matcha", "Matcha milk tea", 50000, 4, "drink", "BAR", 0.9),
    Dish(41, 9, "Combo Phở + Trà sữa nướng", "Pho and roasted milk tea combo", 99000, 9, "main", None, 1.6,
         launched_on="2025-01-10", components=((7, 1), (37, 1))),
    Dish(42, 9, "Combo Bún chả Hà Nội", "Hanoi bun cha combo", 115000, 12, "main", None, 1.3,
         launched_on="2025-01-10", components=((9, 1), (2, 1), (31, 1))),
    Dish(43, 9, "Combo Cơm tấm + Cà phê", "Broken rice and coffee combo", 99000, 11, "main", None, 1.2,
         launched_on="2025-02-01", components=((13, 1), (28, 1))),
    Dish(44, 9, "Combo Lẩu Thái 4 người", "Thai hotpot combo for four", 420000, 15, "main", None, 0.6,
         launched_on="2025-02-01", components=((17, 1), (1, 2), (31, 4))),
    # Withdrawn at the end of April: sold earlier in the data, inactive now.
    Dish(45, 9, "Combo gia đình", "Family combo", 125000, 9, "main", None, 0.8,
         is_active=False, launched_on="2024-06-01", components=((14, 1), (23, 1), (32, 1))),
]
DISH_BY_ID = {d.id: d for d in DISHES}
PHO_BO_OLD_PRICE = 65000
COMBO_GIA_DINH_LAST_DAY = "2025-04-30"
SUP_CUA_LAST_DAY = "2025-05-15"

# Dining tables: (table_no, seats, zone). Ids follow this list (VIP rooms first, as the floor plan
# was entered), so a table's id is not its number: "table 5" means table_no = 5.
DINING_TABLES = [
    (41, 8, "VIP"), (42, 10, "VIP"), (43, 10, "VIP"), (44, 12, "VIP"),
    (21, 4, "GARDEN"), (22, 4, "GARDEN"), (23, 6, "GARDEN"), (24, 6, "GARDEN"), (25, 8, "GARDEN"),
    (26, 4, "GARDEN"), (27, 4, "GARDEN"), (28, 2, "GARDEN"), (29, 2, "GARDEN"), (30, 6, "GARDEN"),
    (31, 2, "TERRACE"), (32, 2, "TERRACE"), (33, 2, "TERRACE"), (34, 4, "TERRACE"), (35, 4, "TERRACE"),
    (36, 2, "TERRACE"),
    (1, 2, "HALL"), (2, 2, "HALL"), (3, 4, "HALL"), (4, 4, "HALL"), (5, 4, "HALL"), (6, 4, "HALL"),
    (7, 6, "HALL"), (8, 6, "HALL"), (9, 2, "HALL"), (10, 4, "HALL"), (11, 4, "HALL"), (12, 4, "HALL"),
    (13, 2, "HALL"), (14, 2, "HALL"), (15, 4, "HALL"), (16, 6, "HALL"), (17, 8, "HALL"), (18, 4, "HALL"),
    (19, 2, "HALL"), (20, 4, "HALL"),
]

# Ingredient -> (unit, restocked every n days, perishable); recipes are per portion.
INGREDIENTS = {
    "thịt bò": ("g", 2, True), "thịt heo": ("g", 2, True), "thịt gà": ("g", 2, True),
    "tôm": ("g", 3, True), "cá": ("g", 3, True), "bánh phở": ("g", 2, True),
    "bún": ("g", 2, True), "gạo": ("g", 5, False), "rau thơm": ("g", 1, True),
    "bánh tráng": ("pcs", 4, False), "sữa tươi": ("ml", 2, True), "trà đen": ("g", 6, False),
    "cà phê": ("g", 5, False), "trân châu": ("g", 3, False), "nước cốt lẩu": ("ml", 3, True),
    "trứng": ("pcs", 3, False), "dừa": ("pcs", 3, True), "bia": ("pcs", 4, False), "đường": ("g", 7, False),
}
RECIPES = {
    1: {"tôm": 40, "thịt heo": 40, "bánh tráng": 3, "rau thơm": 30, "bún": 40},
    2: {"thịt heo": 80, "bánh tráng": 4, "trứng": 1},
    3: {"thịt heo": 120, "bánh tráng": 4, "rau thơm": 30},
    4: {"tôm": 50, "rau thơm": 40},
    5: {"tôm": 40, "thịt heo": 40, "trứng": 1, "rau thơm": 40},
    6: {"trứng": 1, "đường": 5},
    7: {"thịt bò": 120, "bánh phở": 200, "rau thơm": 20},
    8: {"thịt gà": 120, "bánh phở": 200, "rau thơm": 20},
    9: {"thịt heo": 150, "bún": 200, "rau thơm": 40},
    10: {"thịt bò": 100, "thịt heo": 50, "bún": 200, "rau thơm": 20},
    11: {"thịt heo": 80, "tôm": 40, "trứng": 1, "rau thơm": 20},
    12: {"thịt heo": 80, "tôm": 40, "rau thơm": 20},
    13: {"thịt heo": 180, "gạo": 150, "trứng": 1},
    14: {"thịt gà": 150, "gạo": 150, "rau thơm": 20},
    15: {"tôm": 80, "gạo": 180, "trứng": 1},
    16: {"cá": 220, "gạo": 150, "đường": 20},
    17: {"tôm": 200, "thịt bò": 200, "nước cốt lẩu": 2000, "bún": 400, "rau thơm": 200},
    18: {"cá": 300, "thịt heo": 200, "nước cốt lẩu": 2000, "bún": 400, "rau thơm": 200},
    19: {"thịt gà": 600, "nước cốt lẩu": 2000, "bún": 400, "rau thơm": 150},
    20: {"thịt bò": 180, "rau thơm": 30},
    21: {"thịt heo": 300, "đường": 15},
    22: {"tôm": 250},
    23: {"đường": 30, "dừa": 1},
    24: {"trứng": 2, "sữa tươi": 80, "đường": 20},
    25: {"sữa tươi": 120, "đường": 20},
    26: {"sữa tươi": 150, "đường": 10},
    27: {"trứng": 2, "sữa tươi": 80, "đường": 20},
    28: {"cà phê": 25, "sữa tươi": 30},
    29: {"cà phê": 25, "đường": 10},
    30: {"cà phê": 12, "sữa tươi": 80},
    31: {"trà đen": 3},
    32: {"dừa": 1},
    33: {"sữa tươi": 100, "đường": 15},
    34: {"bia": 1},
    35: {"bia": 1},
    36: {"đường": 20},
    37: {"trà đen": 8, "sữa tươi": 150, "đường": 20},
    38: {"trà đen": 8, "sữa tươi": 150, "trân châu": 60, "đường": 25},
    39: {"trà đen": 6, "đường": 20},
    40: {"sữa tươi": 150, "đường": 20},
}

FAMILY_NAMES = ["Nguyễn", "Trần", "Lê", "Phạm", "Hoàng", "Huỳnh", "Phan", "Vũ", "Võ", "Đặng", "Bùi", "Đỗ",
                "Hồ", "Ngô", "Dương", "Lý"]
FAMILY_WEIGHTS = [38, 11, 9, 7, 5, 4, 4, 4, 3, 2, 2, 2, 2, 2, 1, 1]
MIDDLE_NAMES = ["Văn", "Thị", "Minh", "Ngọc", "Thu", "Đức", "Hoàng", "Thanh", "Quốc", "Gia", "Bảo", "Anh"]
GIVEN_NAMES = ["An", "Bình", "Châu", "Dũng", "Giang", "Hà", "Hải", "Hạnh", "Hiếu", "Hoa", "Hùng", "Hương",
               "Khánh", "Lan", "Linh", "Long", "Mai", "My", "Nam", "Nga", "Ngân", "Nhung", "Phúc", "Phương",
               "Quân", "Quang", "Sơn", "Tâm", "Thảo", "Thắng", "Trang", "Trung", "Tú", "Tuấn", "Vy", "Yến"]
ITEM_NOTES = ["ít cay", "không hành", "thêm rau", "ít đá", "không đường", "mang về", "ít ngọt"]
CANCEL_REASONS = ["customer_left", "kitchen_delay", "duplicate_order", "payment_issue"]
