"""Maps the design card's top-level rooms onto one import package, ``reflect_sql``.

Each room (``db/``, ``kb/``, ...) installs as ``reflect_sql.<room>`` so that nothing clashes in
site-packages while the repository keeps every room at its top level. Subpackages are discovered,
so adding a folder with an ``__init__.py`` to a room needs no edit here.
"""
from setuptools import find_packages, setup

ROOMS = ["signatures", "programs", "kb", "optimize", "experiments", "db", "lm"]

package_dir = {"reflect_sql": "reflect_sql"}
packages = ["reflect_sql"] + [f"reflect_sql.{p}" for p in find_packages(where="reflect_sql")]
for room in ROOMS:
    package_dir[f"reflect_sql.{room}"] = room
    packages.append(f"reflect_sql.{room}")
    packages += [f"reflect_sql.{room}.{p}" for p in find_packages(where=room)]

setup(package_dir=package_dir, packages=packages)
