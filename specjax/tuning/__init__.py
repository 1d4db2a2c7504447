"""Choices made by measuring short runs of the API (``lookahead``: ``L=auto``).

Above the API because it calls ``specjax.generate``; nothing below may import it.
"""
