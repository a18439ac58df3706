"""Memories about code (issue 19): the codegraph (codegraph.py) and code anchors."""
