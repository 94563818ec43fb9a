"""Flax NNX helpers: `nnx.jit`-style module init with every Variable on the
mesh it was annotated with.

    model = polymesh_jax.nnx.init(Model)            # like nnx.jit(Model)()
    shardings = polymesh_jax.nnx.state_shardings(Model)  # an nnx.State

Both trace `nnx.state(module_fn(*args))` with `jax.jit`, ask Polymesh where
each leaf of the state lives (`resolve`), and `init` then runs that jit with
those out_shardings and rebuilds the module with `nnx.merge`, the
split/merge pattern the Flax report had to write by hand.

Initializers may compute with ops the export does not map (the common
ones are mapped: threefry's shifts and while loop, the normal draw's
`erf_inv` and `next_after`; a QR for `orthogonal` is not), so these helpers
export with
`unmapped="opaque"`: such ops only need a placement, which propagation gives
them (replicated on a mesh of their operands, with a PolymeshWarning); each
Variable's placement still comes from its own annotation.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax

from ._resolve import resolve


def _nnx():
    from flax import nnx

    return nnx


def _state_fn(module_fn: Callable) -> Callable:
    nnx = _nnx()

    @functools.wraps(module_fn)
    def state_of(*args: Any, **kwargs: Any):
        return nnx.state(module_fn(*args, **kwargs))

    return state_of


def state_shardings(module_fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """The shardings of the state of `module_fn(*args, **kwargs)` (an
    `nnx.State` whose leaves are `NamedSharding`s over the user's meshes)."""
    return resolve(_state_fn(module_fn), args, kwargs, unmapped="opaque").out_shardings


def init(module_fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """`module_fn(*args, **kwargs)` (a Module class or a function returning
    a Module) compiled with `jax.jit`, every Variable placed where Polymesh
    resolves it: on the mesh its sharding annotation names, whatever the
    order of the Variables. Returns the Module."""
    nnx = _nnx()
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: module_fn(*args, **kwargs)))
    pure = _state_fn(module_fn)
    shardings = resolve(pure, args, kwargs, unmapped="opaque").out_shardings
    state = jax.jit(pure, out_shardings=shardings)(*args, **kwargs)
    return nnx.merge(graphdef, state)


__all__ = ["init", "state_shardings"]
