"""Constants the checks compare answers with, written out rather than asked of torch at check time.

An answer runs in the learner's kernel, before its check: had a check computed its expected byte count with
``t.element_size()``, an answer cell holding ``torch.Tensor.element_size = lambda self: 4`` would forge a
pass of the "4 bytes per element" mistake. The tables below are what torch says on a clean interpreter
(``tests/test_checks_lesson00.py`` compares them with ``dtype.itemsize`` and ``element_size()``).
"""

from __future__ import annotations

import torch

BYTES_PER_ELEMENT: dict[torch.dtype, int] = {
    torch.float64: 8,
    torch.float32: 4,
    torch.bfloat16: 2,
    torch.float16: 2,
    torch.float8_e4m3fn: 1,
    torch.float8_e5m2: 1,
    torch.int64: 8,
    torch.int32: 4,
    torch.int8: 1,
    torch.uint8: 1,
    torch.bool: 1,
}
"""Bytes one element of each dtype takes in memory (a bool takes a whole byte)."""
