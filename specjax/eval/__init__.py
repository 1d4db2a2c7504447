"""What a run is judged by: per-prompt metrics, the results file, bootstrap intervals, the
optimum's bound on acceptance (``root_bound``) and the experiment trackers.

Low in the house: it reads counters and laws, never models, so every layer above can report.
"""
