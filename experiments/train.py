"""``specjax-train``: train an EAGLE head, Medusa heads or a draft-family decoder with optax.

    specjax-train drafter=eagle target=smollm2-135m-instruct
    specjax-train drafter=family module.hidden_size=64 module.num_layers=1 steps=3000

Thin on purpose: compose the config (``configs/train``), check it (one line on stderr and exit
code 2 for a bad value, before anything is loaded or written), then ``specjax.training.loop``.
The run directory is ``<cache>/train/<kind>/<target>/<config hash>/``; rerunning the same
command resumes from its latest orbax checkpoint, and a finished run becomes the one that
``drafter=eagle`` / ``drafter=medusa`` load (``model.draft=family/<target>/d<D>-l<layers>``
for the family).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

#: ``configs/train`` of the package's config tree; its ``logger`` group is specjax-run's
#: (``configs/logger``, on the search path: ``hydra.searchpath`` in ``train/config.yaml``).
CONFIG_DIR = Path(__file__).resolve().parent / "configs" / "train"
EXIT_INVALID = 2
GROUP_DIRS = {"drafter": CONFIG_DIR / "drafter", "logger": CONFIG_DIR.parent / "logger"}


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in GROUP_DIRS[group].glob("*.yaml"))


def check_group_overrides(args: list[str]) -> None:
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key in GROUP_DIRS and "(" not in value:
            for choice in value.split(","):
                if choice not in group_options(key):
                    raise ValueError(f"{key}: unknown {key} {choice!r}; allowed: "
                                     f"{', '.join(group_options(key))}")


def run_training(cfg: DictConfig) -> dict:
    from specjax.training.loop import check_config, train

    plain = OmegaConf.to_container(cfg, resolve=True)
    logger = plain.pop("logger")
    check_config(plain)
    return train(plain, tracker=instantiate(logger))


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    try:
        final = run_training(cfg)
    except ValueError as e:
        print(f"specjax-train: error: {e}", file=sys.stderr)
        sys.exit(EXIT_INVALID)
    ev = ", ".join(f"{k} {v:.4g}" for k, v in final["eval"].items())
    print(f"specjax-train: {final['kind']} for {final['target']}: {final['step']} steps, "
          f"{final['tokens_seen']:,} tokens, {final['wall_time_s']:.0f} s; eval: {ev}")
    print(f"specjax-train: saved in {final['run_dir']}")


def main() -> None:
    """Console script ``specjax-train``."""
    try:
        check_group_overrides(sys.argv[1:])
    except ValueError as e:
        print(f"specjax-train: error: {e}", file=sys.stderr)
        sys.exit(EXIT_INVALID)
    _hydra_main()


if __name__ == "__main__":
    main()
