"""The research object of specjax: verifiers as pure array functions and their exact laws.

Nothing here imports from ``specjax``; the engine depends on this package, never the reverse.
"""
