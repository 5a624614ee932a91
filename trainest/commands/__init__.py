"""Typer command functions other than `estimate`, one module each; imported by trainest.cli.

Each module must stay import-light at top level (no numpy, rich or yaml imports there): the CLI
imports all of them at start-up.
"""
