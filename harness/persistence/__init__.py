"""Persistence, the bottom layer: what is kept on disk and how; it imports only ``errors``."""
