"""ATen pointwise ops as rows of the runtime's elementwise instruction set (vnc/ew_table.h).

Each entry mirrors what the eager glue (csrc/elementwise.cpp) does for the op: which table row,
the operand order of ATen's meta function (the TensorIterator's inputs), the compute dtype
(TensorIterator's common dtype unless the glue says otherwise), the parameters, and how
Python numbers enter (as eager's CPU-scalar operands). A compiled pointwise op therefore
computes exactly what the eager kernel computes; fused chains round every intermediate to its
dtype as eager's stores do.

A rule returns a PW expression, or None when the case is not lowered (the op then runs as an
eager step).
"""
from __future__ import annotations

import math

import torch

from .ir import PW, Const, Load

aten = torch.ops.aten

UNARY = ["neg", "sign", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
         "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
         "acosh", "atanh", "erf", "erfc", "erfinv", "sigmoid", "ceil", "floor", "round", "trunc", "frac",
         "silu", "relu", "bitwise_not", "hardsigmoid", "hardswish", "mish"]
# (aten name, table row) of binary ops computed in the common dtype, operands (self, other).
BINARY = [("mul", "mul"), ("div", "div"), ("remainder", "remainder"), ("fmod", "fmod"), ("pow", "pow"),
          ("atan2", "atan2"), ("maximum", "maximum"), ("minimum", "minimum"), ("fmax", "fmax"),
          ("fmin", "fmin"), ("hypot", "hypot"), ("xlogy", "xlogy"), ("bitwise_and", "bitwise_and"),
          ("bitwise_or", "bitwise_or"), ("bitwise_xor", "bitwise_xor"), ("floor_divide", "div_floor")]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
# Backward ops (grad, x) whose ATen meta orders the iterator (grad, x).
GRAD_FIRST = {"silu_backward": "silu_backward", "sigmoid_backward": "sigmoid_backward",
              "tanh_backward": "tanh_backward", "hardswish_backward": "hardswish_backward",
              "mish_backward": "mish_backward"}
# Rows whose integer bodies report division by zero (eager raises ZeroDivisionError).
INT_FAULT_ROWS = {"div_trunc", "div_floor", "remainder", "fmod"}


def _scalar_params(s) -> dict:
    """eager's scalar_params: the float and the integer view of a Scalar (f[0], i[0])."""
    f = float(s.real if isinstance(s, complex) else s)
    i = int(s) if isinstance(s, (bool, int)) else int(f) if math.isfinite(f) else 0
    return {"f": [f], "i": [i]}


# Rows whose bfloat16/float16 kernels read a Python number in float32, as ATen's CPU kernels do
# (mul and the divisions); every other row reads it rounded to the 16-bit dtype (eager's put_scalar).
OPMATH_SCALAR_ROWS = frozenset({"mul", "div", "div_trunc", "div_floor"})
REDUCED = (torch.float16, torch.bfloat16)


def _alpha_params(alpha, dt: torch.dtype) -> dict:
    """eager's add/sub alpha (WithAlpha): float16/bfloat16 read it rounded to ``dt``."""
    return _scalar_params(_as_dtype(alpha, dt) if dt in REDUCED else alpha)


def _as_dtype(v, dt: torch.dtype):
    """A Python number as ATen's CPU kernels read a Scalar argument in the compute dtype ``dt``
    (Scalar::to, c10's checked conversion, as eager's scalar_as): a negative int wraps into an
    unsigned type (-3 is 253 in uint8), float16 / bfloat16 round it. Raises RuntimeError out of
    the type's range ("value cannot be converted to type uint8_t without overflow"). CPU's own
    clamp performs the conversion: it reads its bounds that way, and min(max(x, v), v) is v
    (a real CPU tensor: lowering runs under AOTAutograd's FakeTensorMode)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return torch.zeros((), dtype=dt).clamp(v, v).item()


def _clamp_params(lo, hi, dt: torch.dtype) -> dict | None:
    """eager's clamp_params: the bounds read in ``dt``; None when a bound is out of the type's
    range (the op then runs eagerly, which raises CPU's error)."""
    p = {"f": [0.0, 0.0], "i": [0, 0], "flags": 0}
    for k, v in enumerate((lo, hi)):
        if v is None:
            continue
        try:
            v = _as_dtype(v, dt)
        except RuntimeError:
            return None
        p["flags"] |= 1 << k
        p["f"][k] = float(v)
        p["i"][k] = int(v) if not dt.is_floating_point else 0
    return p


# pow by a scalar special exponent: eager's rows (runtime's vnc_elementwise rewrite, ATen's
# pow_tensor_scalar_kernel); float16 takes powf for 0.5 and -0.5, as ATen.
POW_SPECIAL = {2.0: "pow_sq", 3.0: "pow_cube", 0.5: "sqrt", -0.5: "rsqrt", -1.0: "reciprocal", -2.0: "pow_inv_sq"}


def scalar_kind(compute: torch.dtype) -> torch.dtype:
    """How eager passes a Python number to a kernel computing in `compute` (put_scalar)."""
    if compute.is_complex:
        return torch.complex128
    if compute.is_floating_point:
        return torch.float64
    if compute == torch.bool:
        return torch.bool
    return torch.int64


class Rules:
    """The lowering table: ``rules[op_overload](lw, node, out) -> PW | None``; ``lw`` is the
    Lowerer (``lw.val(x, compute)`` turns an FX argument into an operand)."""

    def __init__(self):
        self.table = {}
        r = self.table
        ew = self._ew
        for name in UNARY:
            op = getattr(aten, name)
            r[op.default] = lambda lw, n, out, row=name: ew(lw, row, [n.args[0]], out)
        r[aten.abs.default] = lambda lw, n, out: None if out.dtype.is_complex or n.args[0].meta["val"].is_complex() \
            else ew(lw, "abs", [n.args[0]], out)
        r[aten.sgn.default] = lambda lw, n, out: None if out.dtype.is_complex else ew(lw, "sign", [n.args[0]], out)
        for name, row in BINARY:
            packet = getattr(aten, name)
            for ov in ("Tensor", "default", "Scalar"):
                if hasattr(packet, ov) and not (name == "pow" and ov == "Scalar"):
                    r[getattr(packet, ov)] = lambda lw, n, out, row=row: ew(lw, row, [n.args[0], n.args[1]], out)
        for ov in ("Tensor", "Scalar"):  # the Scalar overloads are add.Tensor with a wrapped number
            for name in ("add", "sub"):
                r[getattr(getattr(aten, name), ov)] = lambda lw, n, out, row=name: ew(
                    lw, row, n.args[:2], out, _alpha_params(_arg(n, 2, "alpha", 1), out.dtype))
        r[aten.pow.Tensor_Tensor] = lambda lw, n, out: ew(lw, "pow", n.args[:2], out)
        for ov in ("Tensor", "Scalar"):  # rsub(self, other, alpha) = other - alpha * self
            r[getattr(aten.rsub, ov)] = lambda lw, n, out: ew(
                lw, "sub", [n.args[1], n.args[0]], out, _alpha_params(_arg(n, 2, "alpha", 1), out.dtype))
        r[aten.div.Tensor_mode] = self._div_mode
        for name in COMPARE:
            packet = getattr(aten, name)
            for ov in ("Tensor", "Scalar"):
                r[getattr(packet, ov)] = lambda lw, n, out, row=name: ew(
                    lw, row, n.args[:2], out, compute=torch.result_type(*_metas(n.args[:2])))
        for name in ("logical_and", "logical_or", "logical_xor"):
            r[getattr(aten, name).default] = lambda lw, n, out, row=name: ew(
                lw, row, n.args[:2], out, compute=torch.promote_types(*(_dt(a) for a in n.args[:2])))
        for name in ("logical_not", "isnan", "isneginf", "isposinf"):
            r[getattr(aten, name).default] = lambda lw, n, out, row=name: None if _dt(n.args[0]).is_complex \
                else ew(lw, row, [n.args[0]], out, compute=_dt(n.args[0]))
        for name, row in GRAD_FIRST.items():
            r[getattr(aten, name).default] = lambda lw, n, out, row=row: ew(lw, row, n.args[:2], out)
        r[aten.gelu.default] = lambda lw, n, out: ew(
            lw, "gelu_tanh" if n.kwargs.get("approximate", "none") == "tanh" else "gelu", n.args[:1], out)
        r[aten.gelu_backward.default] = lambda lw, n, out: ew(
            lw, "gelu_tanh_backward" if n.kwargs.get("approximate", "none") == "tanh" else "gelu_backward",
            n.args[:2], out)
        # ATen orders these (self, grad): threshold_backward(grad, self, t), leaky_relu_backward.
        r[aten.threshold_backward.default] = lambda lw, n, out: ew(
            lw, "threshold_backward", [n.args[1], n.args[0]], out, _scalar_params(n.args[2]))
        r[aten.leaky_relu_backward.default] = lambda lw, n, out: ew(
            lw, "leaky_relu_backward", [n.args[1], n.args[0]], out, _scalar_params(n.args[2]))
        r[aten.leaky_relu.default] = lambda lw, n, out: ew(
            lw, "leaky_relu", n.args[:1], out, _scalar_params(_arg(n, 1, "negative_slope", 0.01)))
        r[aten.softplus.default] = lambda lw, n, out: ew(
            lw, "softplus", n.args[:1], out, {"f": [float(_arg(n, 1, "beta", 1)), float(_arg(n, 2, "threshold", 20))]})
        r[aten.softplus_backward.default] = lambda lw, n, out: ew(
            lw, "softplus_backward", n.args[:2], out, {"f": [float(n.args[2]), float(n.args[3])]})
        r[aten.elu.default] = lambda lw, n, out: ew(
            lw, "elu", n.args[:1], out, {"f": [float(_arg(n, i, k, d)) for i, k, d in
                                              ((1, "alpha", 1), (2, "scale", 1), (3, "input_scale", 1))]})
        r[aten.elu_backward.default] = lambda lw, n, out: ew(
            lw, "elu_backward", [n.args[0], n.args[5]], out,
            {"f": [float(n.args[1]), float(n.args[2]), float(n.args[3])], "flags": 1 if n.args[4] else 0})
        r[aten.hardtanh_backward.default] = lambda lw, n, out: ew(
            lw, "hardtanh_backward", n.args[:2], out, {"f": [float(n.args[2]), float(n.args[3])]})
        r[aten.hardtanh.default] = self._hardtanh
        r[aten.clamp.default] = lambda lw, n, out: self._clamp(lw, n, out, _arg(n, 1, "min", None), _arg(n, 2, "max", None))
        r[aten.clamp_min.default] = lambda lw, n, out: self._clamp(lw, n, out, n.args[1], None)
        r[aten.clamp_max.default] = lambda lw, n, out: self._clamp(lw, n, out, None, n.args[1])
        r[aten.clamp.Tensor] = self._clamp_tensor
        r[aten.clamp_min.Tensor] = lambda lw, n, out: ew(lw, "maximum", n.args[:2], out)
        r[aten.clamp_max.Tensor] = lambda lw, n, out: ew(lw, "minimum", n.args[:2], out)
        r[aten.where.self] = self._where
        r[aten.masked_fill.Scalar] = self._masked_fill
        # the weight is read in float32 (eager's opmath), never rounded to a 16-bit dtype
        r[aten.lerp.Scalar] = lambda lw, n, out: None if not isinstance(n.args[2], (int, float)) else ew(
            lw, "lerp", list(n.args[:2]) + [Const(float(n.args[2]), torch.float32, via=torch.float32)], out)
        r[aten.lerp.Tensor] = lambda lw, n, out: ew(lw, "lerp", n.args[:3], out)
        r[aten.addcmul.default] = lambda lw, n, out: ew(lw, "addcmul", n.args[:3], out, _scalar_params(n.kwargs.get("value", 1)))
        r[aten.addcdiv.default] = lambda lw, n, out: ew(lw, "addcdiv", n.args[:3], out, _scalar_params(n.kwargs.get("value", 1)))
        r[aten.pow.Tensor_Scalar] = self._pow_scalar
        r[aten.pow.Scalar] = self._pow_scalar_base
        r[aten.nan_to_num.default] = self._nan_to_num
        # Copies and casts: the value converted to the result's dtype.
        for op in (aten._to_copy.default, aten.clone.default, aten.alias_copy.default, aten.lift_fresh_copy.default,
                   torch.ops.prims.convert_element_type.default):
            r[op] = self._cast
        r[aten.copy.default] = lambda lw, n, out: PW("cast", [lw.val(n.args[1], out.dtype)], out.dtype, out.dtype,
                                                      size=tuple(out.shape))
        # Fills: a constant of the result's dtype (eager's fill_ converts the Scalar to it).
        for op, pos in ((aten.full.default, 1), (aten.full_like.default, 1), (aten.new_full.default, 2)):
            r[op] = lambda lw, n, out, pos=pos: self._fill(out, _arg(n, pos, "fill_value", None))
        for op in (aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default, aten.empty.memory_format,
                   aten.empty_like.default, aten.new_empty.default, aten.empty_strided.default):
            r[op] = lambda lw, n, out: self._fill(out, 0)
        for op in (aten.ones.default, aten.ones_like.default, aten.new_ones.default):
            r[op] = lambda lw, n, out: self._fill(out, 1)
        r[aten.scalar_tensor.default] = lambda lw, n, out: self._fill(out, n.args[0])
        r[aten.fill.Scalar] = lambda lw, n, out: self._fill(out, n.args[1])

    # -- helpers

    @staticmethod
    def _ew(lw, row, args, out, params=None, compute=None):
        compute = compute or out.dtype
        if not lw.ew_supported(row, compute):
            return None
        ops = [lw.val(a, compute) for a in args]
        if compute in REDUCED:
            if row not in OPMATH_SCALAR_ROWS:  # Python numbers read in the 16-bit dtype
                ops = [Const(x.value, compute, via=compute) if isinstance(x, Const) and x.via is None else x for x in ops]
            # Tensors of another dtype (a 0-dim float32 tensor, a run-time scalar, integers) are
            # cast to the 16-bit dtype first, as eager's TensorIterator casts them, except mul's
            # and div's one-element second operand, read unrounded (elementwise.c's round_in).
            ops = [PW("cast", [x], compute, compute, {}, tuple(out.shape))
                   if isinstance(x, (Load, PW)) and x.dtype not in (compute, torch.bool, torch.uint8, torch.int8) and
                   not (k == 1 and row in OPMATH_SCALAR_ROWS and isinstance(x, Load) and x.ref.numel == 1) else x
                   for k, x in enumerate(ops)]
        return PW(row, ops, out.dtype, compute, params or {}, tuple(out.shape))

    def _div_mode(self, lw, n, out):
        mode = n.kwargs.get("rounding_mode")
        if mode is None:
            return self._ew(lw, "div", n.args[:2], out)
        if mode == "floor":
            return self._ew(lw, "div_floor", n.args[:2], out)
        if out.dtype in (torch.float16, torch.bfloat16):  # eager rounds the quotient, then truncates it
            q = self._ew(lw, "div", n.args[:2], out)
            return None if q is None else PW("trunc", [q], out.dtype, out.dtype, {}, tuple(out.shape))
        return self._ew(lw, "div_trunc", n.args[:2], out)

    def _hardtanh(self, lw, n, out):
        lo, hi = _arg(n, 1, "min_val", -1.0), _arg(n, 2, "max_val", 1.0)
        if out.dtype == torch.bool:
            return None
        if not out.dtype.is_floating_point:
            lo, hi = int(lo), int(hi)
        return self._clamp(lw, n, out, lo, hi)

    def _clamp(self, lw, n, out, lo, hi):
        if lo is not None and hi is not None and (math.isnan(lo) or math.isnan(hi)):
            return self._fill(out, math.nan)  # eager (ATen): a NaN bound, with both given, fills NaN
        p = _clamp_params(lo, hi, out.dtype)
        return None if p is None else self._ew(lw, "clamp", n.args[:1], out, p)

    def _clamp_tensor(self, lw, n, out):
        lo, hi = _arg(n, 1, "min", None), _arg(n, 2, "max", None)
        if lo is not None and hi is not None:
            return self._ew(lw, "clamp_tensor", [n.args[0], lo, hi], out)
        if lo is not None:
            return self._ew(lw, "maximum", [n.args[0], lo], out)
        return self._ew(lw, "minimum", [n.args[0], hi], out)

    def _where(self, lw, n, out):
        cond, a, b = n.args[:3]
        dt = out.dtype
        if _dt(cond) != torch.bool or not lw.ew_supported("where", dt):
            return None
        # eager: self and other converted to the result dtype first (each a cast), then where
        vals = [lw.val(cond, torch.bool)] + [self._cast_to(lw, x, dt, out) for x in (a, b)]
        return PW("where", vals, dt, dt, {}, tuple(out.shape))

    def _masked_fill(self, lw, n, out):
        self_, mask, value = n.args[:3]
        dt = out.dtype
        if _dt(mask) != torch.bool or not lw.ew_supported("where", dt):
            return None
        # eager: where(mask, scalar_tensor(value, self.dtype) on the host, self)
        return PW("where", [lw.val(mask, torch.bool), Const(value, dt, via=dt), lw.val(self_, dt)], dt, dt, {},
                  tuple(out.shape))

    def _pow_scalar(self, lw, n, out):
        x, e = n.args[:2]
        if isinstance(e, complex) or out.dtype.is_complex:
            return None
        if e == 0:
            return self._fill(out, 1)
        if e == 1:
            return PW("cast", [lw.val(x, out.dtype)], out.dtype, out.dtype, size=tuple(out.shape))
        dt = out.dtype
        if dt not in (torch.float32, torch.float64):  # eager reads the exponent in dt, checked
            try:
                e = _as_dtype(e, dt)
            except RuntimeError:
                return None  # runs eagerly, which raises CPU's error
        row = POW_SPECIAL.get(float(torch.tensor(float(e), dtype=torch.float32))) if dt.is_floating_point else None
        if row is not None and not (dt == torch.float16 and row in ("sqrt", "rsqrt")):
            return self._ew(lw, row, [x], out)
        return self._ew(lw, "pow", [x, Const(float(e), torch.float64)], out)

    def _pow_scalar_base(self, lw, n, out):
        base, e = n.args[:2]
        if isinstance(base, complex) or out.dtype.is_complex:
            return None
        if base == 1:  # eager: ones, whatever the exponent (NaN included)
            return self._fill(out, 1)
        # eager: pow(scalar_tensor(base, result dtype), exponent)
        return self._ew(lw, "pow", [Const(base, out.dtype, via=out.dtype), e], out)

    def _nan_to_num(self, lw, n, out):
        dt = out.dtype
        if not dt.is_floating_point:
            return PW("cast", [lw.val(n.args[0], dt)], dt, dt, size=tuple(out.shape))
        fi = torch.finfo(torch.float32 if dt == torch.float64 else dt)  # float64 computes in float32 (as eager)
        nan, pos, neg = (_arg(n, i, k, None) for i, k in ((1, "nan"), (2, "posinf"), (3, "neginf")))
        clip = (lambda v: min(max(v, torch.finfo(torch.float32).min), fi.max)) if dt == torch.float64 else float
        p = {"f": [0.0 if nan is None else float(nan), fi.max if pos is None else clip(float(pos)),
                   fi.min if neg is None else clip(float(neg))]}
        return self._ew(lw, "nan_to_num", n.args[:1], out, p)

    def _cast(self, lw, n, out):
        src = n.args[0]
        if "device" in n.kwargs and n.kwargs["device"] is not None and torch.device(n.kwargs["device"]).type != "neuron":
            return None
        if _dt(src).is_complex != out.dtype.is_complex and out.dtype.is_complex:
            return None  # real -> complex: eager's copy kernel, not a table row
        return PW("cast", [lw.val(src, out.dtype)], out.dtype, out.dtype, size=tuple(out.shape))

    @staticmethod
    def _cast_to(lw, x, dt, out):
        v = lw.val(x, dt)
        if getattr(v, "dtype", dt) == dt or isinstance(v, Const):
            return v
        return PW("cast", [v], dt, dt, size=tuple(out.shape))

    @staticmethod
    def _fill(out, value):
        if isinstance(value, complex) and not out.dtype.is_complex:
            return None
        return PW("fill", [Const(value, out.dtype, via=out.dtype)], out.dtype, out.dtype, size=tuple(out.shape))


def _arg(n, i, key, default):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(key, default)


def _dt(x) -> torch.dtype:
    if isinstance(x, torch.fx.Node):
        return x.meta["val"].dtype
    if isinstance(getattr(x, "dtype", None), torch.dtype):
        return x.dtype
    if isinstance(x, bool):
        return torch.bool
    if isinstance(x, int):
        return torch.int64
    if isinstance(x, float):
        return torch.float64
    return torch.complex128


def _metas(args):
    """Fake tensors (or numbers) standing for the operands, for PyTorch's type promotion."""
    out = []
    for a in args:
        if isinstance(a, torch.fx.Node):
            out.append(a.meta["val"])
        elif isinstance(getattr(a, "dtype", None), torch.dtype):
            out.append(torch.empty(getattr(a, "size", ()) or (), dtype=a.dtype, device="meta"))
        else:
            out.append(a)
    return out


RULES = Rules().table
