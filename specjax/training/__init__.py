"""Training drafters with optax (``specjax-train``): EAGLE heads, Medusa heads, a draft family.

- ``tasks``: what each kind trains (the trainable module) and its loss on a token batch;
- ``data``: training text from the machine (stdlib sources, prompt suites) and the target's
  own generations (self-distillation), tokenized with the target's tokenizer and cached;
- ``loop``: AdamW + warmup-cosine + clipping, jitted step, eval, orbax checkpoints, trackers;
- ``store``: where runs live (cache dir, keyed by a config hash) and how drafters load them;
- ``family``: the tiny draft decoders, loadable as ``model.draft`` for the ``model`` drafter.
"""
