"""CSV cells a spreadsheet would evaluate, neutralized: a text cell starting like a formula gets
a leading ``'`` (README.md, "Spreadsheets"). Numbers stay numbers, and the JSONL and Parquet
outputs keep the raw text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    import pyarrow as pa

FORMULA_START = r"^[=+\-@\t\r]"


def _neutralized_array(array: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(array.type):
        chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
        return pa.chunked_array(
            [pa.DictionaryArray.from_arrays(chunk.indices, _neutralized_array(chunk.dictionary))
             for chunk in chunks],
            type=array.type,
        )
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return array
    risky = pc.match_substring_regex(array, FORMULA_START)
    if not pc.any(risky).as_py():
        return array  # the usual case: nothing to copy
    quote = pa.scalar("'", type=array.type)
    return pc.if_else(risky, pc.binary_join_element_wise(quote, array, pa.scalar("", array.type)),
                      array)


def has_formula_cells(table: pa.Table) -> bool:
    """Whether any text cell of ``table`` would be evaluated by a spreadsheet."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return any(
        pc.any(pc.match_substring_regex(column, FORMULA_START)).as_py()
        for column in table.columns
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    )


def neutralized_table(table: pa.Table) -> pa.Table:
    """``table`` with every text cell a spreadsheet would evaluate made plain text."""
    import pyarrow as pa

    return pa.table([_neutralized_array(column) for column in table.columns],
                    schema=table.schema)


def neutralized_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell a spreadsheet would evaluate made plain text."""
    risky = frame.select_dtypes(include=["object", "string"]).columns
    return frame.assign(**{
        column: frame[column].map(
            lambda cell: f"'{cell}" if isinstance(cell, str) and re.match(FORMULA_START, cell)
            else cell
        )
        for column in risky
    })
