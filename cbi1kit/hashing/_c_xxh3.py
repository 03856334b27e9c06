"""python-xxhash's C XXH3, callable from numba kernels (the block hashes, the capture's block
checks, the CBI1 checksums): inputs over a few hundred bytes hash at the library's speed, its
runtime-dispatched SIMD loop, where a numba stripe loop ran at a third of it.

Each function is bound once per process, here, to a fixed symbol name the kernels call, so
their compiled code caches like the rest (each library name: its dispatching variant where the
wheel has one, else the plain one). ``ImportError`` when the library lacks one of them:
the callers then keep their Python or reference paths.
"""

from __future__ import annotations

import ctypes
from typing import Final

import llvmlite.binding as llvm
import numba

_C_FUNCTIONS: Final = {
    "cbi1kit_xxh3_64": ("XXH3_64bits_dispatch", "XXH3_64bits"),
    "cbi1kit_xxh3_64_with_seed": ("XXH3_64bits_withSeed_dispatch", "XXH3_64bits_withSeed"),
    "cbi1kit_xxh3_reset": ("XXH3_64bits_reset",),
    "cbi1kit_xxh3_update": ("XXH3_64bits_update_dispatch", "XXH3_64bits_update"),
    "cbi1kit_xxh3_digest": ("XXH3_64bits_digest",),
}


def _bind() -> None:
    import xxhash._xxhash as c_xxhash

    lib = ctypes.CDLL(c_xxhash.__file__)
    for symbol, names in _C_FUNCTIONS.items():
        fn = next((f for f in (getattr(lib, n, None) for n in names) if f is not None), None)
        if fn is None:
            raise ImportError(f"{c_xxhash.__file__} exports none of {names}")
        llvm.add_symbol(symbol, ctypes.cast(fn, ctypes.c_void_p).value)


_bind()
_T = numba.types
#: XXH3-64 of (address, length), seed 0
c_xxh3 = _T.ExternalFunction("cbi1kit_xxh3_64", _T.uint64(_T.uintp, _T.uintp))
#: XXH3-64 of (address, length, seed)
c_xxh3_seeded = _T.ExternalFunction(
    "cbi1kit_xxh3_64_with_seed", _T.uint64(_T.uintp, _T.uintp, _T.uint64)
)
#: the streaming trio over a state of ``STATE_BYTES`` (64-byte aligned): reset(state),
#: update(state, address, length), digest(state)
c_reset = _T.ExternalFunction("cbi1kit_xxh3_reset", _T.int32(_T.uintp))
c_update = _T.ExternalFunction("cbi1kit_xxh3_update", _T.int32(_T.uintp, _T.uintp, _T.uintp))
c_digest = _T.ExternalFunction("cbi1kit_xxh3_digest", _T.uint64(_T.uintp))
STATE_BYTES: Final = 576  # sizeof(XXH3_state_t) (xxHash 0.8)
