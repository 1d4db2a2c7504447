"""The machine under everything else: downloaded assets, what CPU this is, how fast it reads and
multiplies (``probes``), the compile cache, and which commit produced a result.

The lowest layer of ``specjax``: it imports nothing from the rest of the package, so models,
benchmarks and result writers can all ask it about the machine.
"""
