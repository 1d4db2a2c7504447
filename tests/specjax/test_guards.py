"""Input guards of ``specjax.generate``: each is one ``ValueError`` line.

- A prompt that does not fit the model's context with ``max_new_tokens`` is refused before
  anything compiles.
- NaN/inf laws are caught inside the jitted loop: the sequence stops, nothing is sampled from
  them, and ``generate`` raises naming the prompt. Expected token counts come from positions
  (generated token j of a P-token prompt is drawn from the logits at position P-1+j), not from
  another engine run.
- The toy models (context order 3) read token ids only and say so.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import generate
from specjax.drafters import ModelDrafter
from specjax.models.sampling import Sampling
from specjax.models.toy import TOY_ORDER, ToyLM, ToyLoaded, load_toy

FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
NAN_FROM = 6  # positions >= 6 get broken logits


class BrokenFrom(ToyLM):
    """The toy LM whose logits at positions >= ``start`` are replaced by ``value`` (a model
    that goes numerically bad mid-generation); ``column`` replaces one token's logit only."""

    def __init__(self, tables, order, *, start: int, value: float, column: int | None = None):
        super().__init__(tables, order)
        self.start, self.value, self.column = start, value, column

    def forward(self, tokens, positions, slots, mask, cache):
        logits, cache = super().forward(tokens, positions, slots, mask, cache)
        hit = (positions >= self.start)[:, None]
        if self.column is not None:
            hit = hit & (jnp.arange(logits.shape[-1]) == self.column)[None, :]
        return jnp.where(hit, self.value, logits), cache


def broken(name: str, value: float, start: int = NAN_FROM, column=None) -> ToyLoaded:
    toy = load_toy(name)
    return ToyLoaded(name=f"broken-{name}", model=BrokenFrom(
        toy.model.exact.laws, toy.model.order, start=start, value=value, column=column))


def test_prompt_longer_than_the_context_is_refused_before_compiling(monkeypatch):
    target = load_toy("toy-target")
    limit = target.model.max_len  # 1024: the toys' context

    class Compiled(Exception):
        pass

    def no_jit(*a, **k):
        raise Compiled

    monkeypatch.setattr(jax, "jit", no_jit)
    long = [1] * (limit - 7)
    with pytest.raises(ValueError, match=rf"^prompts: prompt 1 has {limit - 7} tokens; with "
                       rf"max_new_tokens=8 it needs {limit + 1} positions, over the {limit}-token "
                       r"context of 'toy-target'; lower max_new_tokens to at most 7"):
        generate(target, [[1, 2], long], max_new_tokens=8, progress=False)
    with pytest.raises(ValueError, match=r"prompt 0 has 1030 tokens.*shorten the prompt"):
        generate(target, [[0] * 1030], max_new_tokens=1, progress=False)
    with pytest.raises(Compiled):  # exactly the context: the guard lets it through to compile
        generate(target, [[1, 2], long], max_new_tokens=7, progress=False)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_autoregressive_stops_at_nonfinite_logits_and_names_the_prompt(value):
    """Greedy would silently argmax a NaN row; the loop must stop instead. Prompt 0 (2 tokens,
    4 new) reads positions 1..4 only; prompt 1 (5 tokens) reads 4, 5, then 6 = NAN_FROM: two
    tokens, then the error. -inf in every entry is no law either."""
    target = broken("toy-target-v8", value)
    with pytest.raises(ValueError, match=r"^prompts: prompt 1: the target's logits were not "
                       r"finite \(NaN/inf\) after 2 generated tokens;"):
        generate(target, [[1, 2], [0, 1, 2, 3, 0]], sampling=Sampling(temperature=0),
                 max_new_tokens=4, compiler_options=FAST, progress=False)


def test_one_masked_logit_is_not_an_error():
    """A single -inf logit is a legitimate mask (probability 0), not a broken model."""
    target = broken("toy-target-v8", -np.inf, start=0, column=3)
    res = generate(target, [[1, 2]] * 64, sampling=Sampling(temperature=1.0), max_new_tokens=6,
                   compiler_options=FAST, progress=False)
    assert all(len(t) == 6 for t in res.tokens)
    assert 3 not in {x for t in res.tokens for x in t}  # ~384 draws, p(3) > 0 without the mask


# Prompt 0 (1 token, 2 new) only reaches positions <= 1 + L = 4 < NAN_FROM; prompt 1 (5 tokens)
# reaches position 6 in its first step, so nothing may be emitted for it.
SPEC = dict(drafter=ModelDrafter(K=1, L=3), verifier="token", max_new_tokens=2,
            sampling=Sampling(temperature=1.0), compiler_options=FAST, progress=False)
SPEC_PROMPTS = [[1], [0, 1, 2, 3, 0]]


def test_speculative_stops_on_nan_target():
    # The tree scores positions 4..7 of prompt 1.
    with pytest.raises(ValueError, match=r"prompt 1: the target's logits .* after 0 generated"):
        generate(broken("toy-target-v8", np.nan), SPEC_PROMPTS, draft=load_toy("toy-draft-v8"),
                 **SPEC)


def test_speculative_stops_on_nan_draft():
    # The draft's third token of prompt 1 is drawn at position 4 + 2 = 6: its law q is NaN.
    with pytest.raises(ValueError, match=r"prompt 1: the drafter's laws q .* after 0 generated"):
        generate(load_toy("toy-target-v8"), SPEC_PROMPTS, draft=broken("toy-draft-v8", np.nan),
                 **SPEC)


def test_toy_tokenizer_names_the_datasets_it_takes():
    with pytest.raises(ValueError, match=r"^toy tokenizer: .*dataset=toy only.*'Complete"):
        generate("toy-target", ["Complete the following code"], progress=False)


def test_toy_law_reads_three_tokens_back():
    """Order 3: the token two before the next one changes its law (so a cache error there
    changes the sampled law at T > 0, not only greedy outputs)."""
    assert TOY_ORDER == 3
    toy = load_toy("toy-target")
    assert toy.model.order == 3 and toy.model.exact.laws.shape == (2, 5**3, 4)
    tv = [0.5 * np.abs(toy.law([a, 1, 2]) - toy.law([b, 1, 2])).sum()
          for a in range(4) for b in range(a)]
    assert min(tv) > 0.05
    np.testing.assert_array_equal(toy.law([0, 3, 1, 2]), toy.law([3, 1, 2]))  # 3 tokens only
