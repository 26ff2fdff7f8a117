"""A column of the contract: name, Arrow type, unit and meaning (and the type shorthands)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    doc: str
    nullable: bool = True


S = pa.string()
F = pa.float64()
I64 = pa.int64()
I32 = pa.int32()
B = pa.bool_()
TS = pa.timestamp("us", tz="UTC")
