"""The Hydra config tree of ``specjax-run`` (``config.yaml``) and ``specjax-train`` (``train/``).

Package data: ``experiments.configs`` (``experiments/configs`` links here; a wheel holds the
files), so the apps and ``hydra.searchpath: pkg://experiments.configs`` find the YAML files in
an installed copy as in a checkout. No Python lives here.
"""
