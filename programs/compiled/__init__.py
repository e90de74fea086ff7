"""Compiled programs shipped with the package, one per embedded model, named by the model:
``local/<name>`` runs ``<name>.json`` by default (``programs/shipped.py``). Each is saved by
``reflect-sql compile`` and records in ``metadata.reflect_sql`` the LM it was compiled for, the
optimizer, the train split, the command that reproduces it and the agreement report.

A package (this file) so that its ``*.json`` install as package data.
"""
