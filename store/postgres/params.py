"""The Postgres store's parameters: a vector sent in binary as `real[]` (float4[]), and pgvector's
text form of a vector (`vector_literal`). Arrays of other values are bound as Python lists in
binary (`%(name)b`: psycopg sends each list as a typed array, a list of NULLs only as text).

A vector's text form costs ~130 µs to write for 384 dimensions and as much for Postgres to parse;
the binary `real[]` form costs ~20 µs and is cast to `vector(D)` in SQL
(`CAST(CAST(%(v)s AS real[]) AS vector(384))`, pgvector's array cast). Its type OID is built in, so
one dumper serves every database (pgvector's own binary type has a per-database OID, looked up on
every new connection). `register_vector_dumper` adds it to each connection as it is opened
(`store.postgres.connections`), as pgvector-python registers its types.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from psycopg import BaseConnection
from psycopg.adapt import Dumper
from psycopg.pq import Format

FLOAT4_OID = 700
FLOAT4_ARRAY_OID = 1021
_ONE_DIMENSION = struct.Struct(">iiiii")  # ndim, has nulls, element type, length, lower bound
_NO_DIMENSION = struct.Struct(">iii")
# each element is its byte length (4) and its big-endian value
_ELEMENT = np.dtype([("size", ">i4"), ("value", ">f4")])


class Float4Array(bytes):
    """A `real[]` parameter in Postgres's binary array format (make one with `float4_array`)."""


def float4_array(values: Sequence[float] | Iterable[float] | np.ndarray[Any, Any]) -> Float4Array:
    """The values as one binary `real[]` parameter (float32, as pgvector stores them)."""
    flat = values if isinstance(values, Sequence | np.ndarray) else list(values)
    floats = np.asarray(flat, dtype=">f4")
    if floats.ndim != 1:
        raise ValueError(f"float4_array takes a flat sequence of numbers, not shape {floats.shape}")
    if not len(floats):
        return Float4Array(_NO_DIMENSION.pack(0, 0, FLOAT4_OID))
    body = np.empty(len(floats), dtype=_ELEMENT)
    body["size"] = 4
    body["value"] = floats
    return Float4Array(_ONE_DIMENSION.pack(1, 0, FLOAT4_OID, len(floats), 1) + body.tobytes())


class Float4ArrayDumper(Dumper):
    """Sends a `Float4Array` as it is, in binary, typed `real[]`."""

    format = Format.BINARY
    oid = FLOAT4_ARRAY_OID

    def dump(self, obj: Float4Array) -> bytes:
        return obj


def register_vector_dumper(connection: BaseConnection[Any]) -> None:
    """Let this psycopg connection send `Float4Array` parameters (for its cursors from now on)."""
    connection.adapters.register_dumper(Float4Array, Float4ArrayDumper)


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form of a vector, `[x,y,…]` (what `CAST(... AS vector(D))` reads): the
    float32 values pgvector stores, each in the nine significant digits that give it back exactly.
    40 % less text than `repr` of the doubles, in half the time (it runs for every memory written
    and every recall query)."""
    values = tuple(np.asarray(vector, dtype=np.float32).tolist())
    return _vector_format(len(values)) % values


@functools.lru_cache(maxsize=8)
def _vector_format(dim: int) -> str:
    # one %-format of the whole tuple: a fifth faster than formatting each value and joining
    return "[" + ",".join(["%.9g"] * dim) + "]"
