"""Shared test helpers: plain functions and classes that test modules import (fixtures stay in
the conftest.py files, and no test module imports another)."""
