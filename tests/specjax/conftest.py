import ctypes

import jax
import pytest

from specjax.models import kernels


@pytest.fixture(scope="session")
def haswell():
    """The CPU kernels built for Haswell (AVX2, no AVX-512) and registered under their own names
    (target -> name), so tests on an AVX-512 machine check the AVX2 form too."""
    lib = ctypes.cdll.LoadLibrary(str(kernels.build(march="haswell")))
    names = {}
    for target in (kernels.Q8_TARGET, kernels.F32_TARGET, kernels.ATTENTION_TARGET):
        names[target] = f"{target}_haswell"
        try:
            jax.ffi.register_ffi_target(names[target], jax.ffi.pycapsule(getattr(lib, target)),
                                        platform="cpu")
        except Exception:  # noqa: BLE001 - already registered by an earlier run in this process
            pass
    return names
