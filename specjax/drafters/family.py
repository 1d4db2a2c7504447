"""The draft family as ``model`` drafters: ``family/<target>/d<D>-l<layers>`` names.

``specjax-train drafter=family module.hidden_size=D module.num_layers=N target=<target>`` trains
one member; ``specjax.load_model("family/<target>/dD-lN")`` (and so ``specjax-run drafter=model
model.draft=family/<target>/dD-lN``) loads the most recently finished run with that shape, with
the target's tokenizer (the GGUF's, for real targets).
"""

from __future__ import annotations

import json
import re

from specjax.models.config import ModelConfig
from specjax.training import store

NAME = re.compile(r"^family/(?P<target>[^/]+)/d(?P<d>\d+)-l(?P<l>\d+)$")


def family_name(target_name: str, hidden_size: int, num_layers: int) -> str:
    return f"family/{target_name}/d{hidden_size}-l{num_layers}"


def find_run(target_name: str, hidden_size: int, num_layers: int, cache_dir=None):
    """The latest finished family run of this shape for the target, or None."""
    root = store.kind_root("family", target_name, cache_dir)
    want = {"hidden_size": hidden_size, "num_layers": num_layers}
    runs = [p.parent for p in root.glob("*/final.json")
            if json.loads(p.read_text()).get("module") == want]
    return max(runs, key=lambda r: (r / "final.json").stat().st_mtime) if runs else None


def load_family(name: str, cache_dir=None):
    from specjax.training.checkpoints import restore_params
    from specjax.training.tasks import make_trainable

    m = NAME.match(name)
    if m is None:
        raise ValueError(f"model: family name {name!r} must look like "
                         "family/<target>/d<hidden>-l<layers>, e.g. "
                         "family/smollm2-135m-instruct/d128-l2")
    target_name, d, n = m["target"], int(m["d"]), int(m["l"])
    run = find_run(target_name, d, n, cache_dir)
    if run is None:
        raise ValueError(f"model: no trained draft {name!r} under "
                         f"{store.kind_root('family', target_name, cache_dir)}; train it: "
                         f"specjax-train drafter=family target={target_name} "
                         f"module.hidden_size={d} module.num_layers={n}")
    final = json.loads((run / "final.json").read_text())
    target_config = ModelConfig(**final["target_config"])
    model = make_trainable("family", target_config, hidden_size=d, num_layers=n)
    restore_params(run, model)
    if target_name.startswith("tiny-"):
        from specjax.models.toy import ToyLoaded

        return ToyLoaded(name=name, model=model, eos_ids=target_config.eos_ids)
    from specjax.assets import fetch
    from specjax.models.loader import LoadedModel
    from specjax.models.tokenizer import GGUFTokenizer

    tokenizer = GGUFTokenizer.from_gguf(fetch(target_name, cache_dir))
    return LoadedModel(name, model.config, model, tokenizer)
