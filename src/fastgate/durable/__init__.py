"""Durability: the tool-use store protocol, the SQLite store and the projector."""
