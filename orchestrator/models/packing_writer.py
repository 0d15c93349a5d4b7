"""``gguf.GGUFWriter`` that packs each big metadata array once per process (the tiny model's writer)."""

from __future__ import annotations

import functools
from typing import Any

# the packed bytes of the tokenizer's big arrays, by (id, type, endianness): (the array, a hash of its
# items, its bytes)
_PACKED: dict[tuple[Any, ...], tuple[Any, int, bytes]] = {}


@functools.cache
def packing_writer() -> Any:
    """``gguf.GGUFWriter`` that packs each big metadata array once per process.

    The writer packs an array item by item in Python: the copied tokenizer's 300,000 strings and
    151,936 token types were about 0.5 s of every tiny model's 0.9 s write, and a process (the
    tests, a gpu check) writes several. Only lists longer than 4096 items are kept, and a hit
    must be the very same list object (``is``: a reused ``id`` is not a hit) with the same items
    (a hash of them: a list changed in place is not a hit either)."""
    import gguf

    class Writer(gguf.GGUFWriter):
        def _pack_val(self, val: Any, vtype: Any, add_vtype: bool, sub_type: Any = None) -> bytes:
            if not (isinstance(val, list) and len(val) > 4096):
                return bytes(super()._pack_val(val, vtype, add_vtype, sub_type))
            key = (id(val), vtype, add_vtype, sub_type, self.endianess)
            seal = hash(tuple(val))  # a few ms: a list changed in place since is packed again
            hit = _PACKED.get(key)
            if hit is None or hit[0] is not val or hit[1] != seal:
                if len(_PACKED) >= 16:  # vocabularies of earlier sources: let them go
                    _PACKED.clear()
                hit = _PACKED[key] = (val, seal, bytes(super()._pack_val(val, vtype, add_vtype, sub_type)))
            return hit[2]

    return Writer
