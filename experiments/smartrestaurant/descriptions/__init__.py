"""BIRD-format column descriptions of the SmartRestaurant tables.

A package only so that setuptools ships the CSVs (package data covers package folders).
"""
