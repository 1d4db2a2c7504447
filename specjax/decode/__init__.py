"""The decode loop (``engine``), its layout on a device mesh (``parallel``) and where its time
goes (``breakdown``).

Sits above models and drafters, whose passes it runs, and below the API, which compiles it.
"""
