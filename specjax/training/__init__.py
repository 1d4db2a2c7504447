"""Training drafters with optax (``specjax-train``): EAGLE heads, Medusa heads, a draft family.

- ``tasks``: what each kind trains (the trainable module) and its loss on a token batch;
- ``data``: training text from the machine (stdlib sources, prompt suites) and the target's
  own generations (self-distillation), tokenized with the target's tokenizer and cached;
- ``loop``: AdamW + warmup-cosine + clipping, jitted step, eval, orbax checkpoints, trackers;
- ``checkpoints``: saving and resuming a run's parameters and optimizer state.

Where runs live and how drafters find them is ``specjax.drafters.runs``; the modules trained are the
drafters' own (``specjax.drafters``: ``EagleDrafter.trainable``, ``MedusaDrafter.trainable``,
``drafters.family``). Training imports the drafters, never the other way round.
"""
