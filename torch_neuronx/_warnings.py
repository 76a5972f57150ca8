"""The backend's user warnings (CPU fallback, float64), attributed to the user's code.

The C++ side calls :func:`emit` for each warning it raises (once per op for the fallback, once
per process for float64). A warning names the first stack frame outside PyTorch and this
package (its ``examples`` count as user code), like ``warnings.warn(..., stacklevel=n)`` with
the right ``n``, so that the file and line shown are the user's call, not a line of PyTorch.

float64 arithmetic done by PyTorch's own machinery on behalf of a float32 program is not the
user's float64 use and does not trigger the float64 warning (nor use up its one showing):
``torch.amp.GradScaler.unscale_`` computes the inverse scale as
``self._scale.double().reciprocal().float()`` (torch/amp/grad_scaler.py); the scale is a power
of two, so float32 computes it exactly.
"""
from __future__ import annotations

import os
import sys
import warnings

import torch

FALLBACK, FLOAT64 = 0, 1  # the C++ WarningKind values

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_EXAMPLES_DIR = os.path.join(_PACKAGE_DIR, "examples") + os.sep
_INTERNAL_FLOAT64 = frozenset({os.path.join(_TORCH_DIR, "amp", "grad_scaler.py")})


def _is_library(filename: str) -> bool:
    return filename.startswith(_TORCH_DIR) or (filename.startswith(_PACKAGE_DIR)
                                               and not filename.startswith(_EXAMPLES_DIR))


def emit(message: str, kind: int) -> bool:
    """Raise ``message`` as a UserWarning at the user's line; return whether it was raised.

    Args:
        message: the warning text.
        kind: FALLBACK (0) or FLOAT64 (1).

    Returns:
        False for a float64 warning that PyTorch's own float64 arithmetic (``_INTERNAL_FLOAT64``)
        caused, True otherwise.

    Raises:
        Whatever the warning filters turn a UserWarning into (``-W error``: the warning itself).
    """
    try:
        frame = sys._getframe(1)  # the Python frame whose call reached the backend
    except ValueError:  # no Python frame: an op run by the autograd engine's device thread
        frame = None
    level = 2
    while frame is not None and _is_library(frame.f_code.co_filename):
        if kind == FLOAT64 and frame.f_code.co_filename in _INTERNAL_FLOAT64:
            return False
        if frame.f_back is None:
            break
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level if frame is not None else 1)
    return True
