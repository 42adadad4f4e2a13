"""Selection by a one-hot vector."""

from amaranth import *

__all__ = ["one_hot_select"]


def one_hot_select(onehot, values):
    """``values[k]`` for the bit ``k`` set in ``onehot`` (zero when none is), each
    value zero-extended to the widest.

    An OR of the values masked by their bits, as a balanced tree: with the
    one-hot vector in a register (or from an arbiter's one-hot grant) this is
    a level or two shorter than decoding a binary index into a multiplexer.
    """
    terms = [Mux(onehot[k], Value.cast(v), 0) for k, v in enumerate(values)]
    if not terms:
        return C(0, 1)
    while len(terms) > 1:
        terms = [a | b for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) & ~1:]
    return terms[0]
