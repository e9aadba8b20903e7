"""Caffe2 loader: a predict net (the computation) and an init net (the fill ops creating its
weights) become graph IR calls. Like the ONNX loader it only translates protobuf: op semantics
live in the op definitions, and Caffe2 operators are mapped onto them in caffe2_ops.py,
caffe2_movement.py and caffe2_int8.py (caffe2_ctx.py reads their arguments).

Model forms (`-model` may be repeated):
  DIR                    predict_net.pb[txt] and init_net.pb[txt] in a directory
  PREDICT INIT           two files, binary or protobuf text (.pbtxt)
  PREDICT                a predict net that needs no weights (or creates them itself)
Caffe2 does not record the net's inputs: each external input an operator reads needs
`-model-input=name,type,[shape]`."""
from __future__ import annotations

import math
import os
import warnings

import numpy as np

from glowpy.errors import ModelError, UsageError, show
from glowpy.frontend.caffe2_ctx import Args, Ctx, dtype_of
from glowpy.frontend.caffe2_int8 import (INT8_FILLS, INT8_MIN_INPUTS, INT8_TRANSLATORS,
                                         fill_qparams, int8_fill_values, propagate_qparams,
                                         refusal_reason)
from glowpy.frontend.caffe2_ops import MIN_INPUTS, TRANSLATORS
from glowpy.ir.graph import Graph

MAX_PROTO = 2 * 1024 ** 3  # protobuf cannot parse messages of 2 GiB or more


# -- reading the nets -------------------------------------------------------------------------

def _find_in_dir(d: str, kind: str) -> str | None:
    """DIR/<kind>.pb, DIR/<kind>.pbtxt, or the only DIR/*<kind>.pb[txt]."""
    for ext in (".pb", ".pbtxt"):
        p = os.path.join(d, kind + ext)
        if os.path.isfile(p):
            return p
    found = sorted(f for f in os.listdir(d) if f.endswith((f"{kind}.pb", f"{kind}.pbtxt")))
    if len(found) > 1:
        raise ModelError(f"directory '{show(d)}' holds several {kind} files "
                         f"({', '.join(show(f) for f in found[:4])}); give the predict and init "
                         "nets as two -model options")
    return os.path.join(d, found[0]) if found else None


def resolve_paths(paths: list[str]) -> tuple[str, str | None]:
    """(predict net path, init net path or None)."""
    if not paths:
        raise UsageError("-model is required")
    if len(paths) > 2:
        raise UsageError(f"{len(paths)} -model options given; a Caffe2 model is one directory, "
                         "or -model=PREDICT_NET [-model=INIT_NET]")
    if len(paths) == 1 and os.path.isdir(paths[0]):
        d = paths[0]
        predict = _find_in_dir(d, "predict_net")
        if predict is None:
            raise ModelError(f"directory '{show(d)}' holds no predict_net.pb or predict_net.pbtxt")
        return predict, _find_in_dir(d, "init_net")
    for p in paths:
        if os.path.isdir(p):
            raise UsageError(f"-model={show(p)} is a directory; with two -model options give the "
                             "predict and init net files")
    return paths[0], (paths[1] if len(paths) == 2 else None)


def read_net(path: str):
    """A NetDef from a binary (.pb) or text (.pbtxt) protobuf file."""
    from google.protobuf import text_format
    from google.protobuf.message import DecodeError, Error as ProtobufError

    from glowpy.frontend.caffe2_proto import NetDef
    if not os.path.isfile(path):
        raise ModelError(f"cannot read Caffe2 net '{show(path)}': "
                         f"{'no such file' if not os.path.exists(path) else 'not a regular file'}")
    try:
        if os.path.getsize(path) >= MAX_PROTO:
            raise ModelError(f"'{show(path)}' is 2 GiB or larger, more than protobuf can parse")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ModelError(f"cannot read Caffe2 net '{show(path)}': {e.strerror}") from None
    net = NetDef()
    if path.endswith(".pbtxt") or path.endswith(".prototxt"):
        try:
            text_format.Parse(data.decode("utf-8"), net)
        except RecursionError:  # nested nets in arguments, thousands deep
            raise ModelError(f"'{show(path)}' is not a usable Caffe2 NetDef: its messages are "
                             "nested too deeply") from None
        except (text_format.ParseError, UnicodeDecodeError, ProtobufError) as e:
            raise ModelError(f"'{show(path)}' is not a Caffe2 NetDef in protobuf text format "
                             f"({show(str(e), 300)})") from None
        return net
    hint = " (it is an ONNX model: give it the .onnx extension)"
    if _looks_like_onnx(data):
        # before the NetDef parse: ONNX bytes can also parse as a NetDef (mnist8 without its
        # initializers in graph.input gave one whose external output was a stray string)
        raise ModelError(f"'{show(path)}' is not a Caffe2 NetDef{hint}")
    try:
        net.ParseFromString(data)
    except (DecodeError, ProtobufError, RuntimeError, ValueError) as e:
        if _looks_like_onnx(data):
            raise ModelError(f"'{show(path)}' is not a Caffe2 NetDef{hint}") from None
        raise ModelError(f"'{show(path)}' is not a binary Caffe2 NetDef (protobuf parse error: "
                         f"{show(str(e), 300)}); text nets need the .pbtxt extension") from None
    if data and not (net.op or net.external_input or net.external_output or net.name):
        raise ModelError(f"'{show(path)}' is not a Caffe2 NetDef: it holds no operators, name "
                         f"or external inputs/outputs{hint if _looks_like_onnx(data) else ''}")
    return net


def _looks_like_onnx(data: bytes) -> bool:
    try:
        import onnx
        m = onnx.ModelProto()
        m.ParseFromString(data)
        # a model's version fields and a graph with operators: a NetDef's bytes that happen to
        # parse (its external_input is field 7, as ModelProto.graph) have neither
        return bool(m.ir_version and m.opset_import and m.graph.node
                    and all(n.op_type for n in m.graph.node))
    except Exception:  # noqa: BLE001 - only a hint
        return False


def _is_fill_net(net) -> bool:
    return bool(net.op) and all(op.type in FILLS for op in net.op)


# -- fill ops (weights) ----------------------------------------------------------------------

# Caffe2's TensorProto.DataType -> numpy
# fill op -> element type of its values (None: ConstantFill's `dtype`/`value` decide)
FILLS = {"GivenTensorFill": np.float32, "GivenTensorIntFill": np.int32,
         "GivenTensorInt64Fill": np.int64, "GivenTensorBoolFill": np.bool_,
         "GivenTensorByteStringToUInt8Fill": np.uint8, "ConstantFill": None, **INT8_FILLS}
OPS = {**TRANSLATORS, **INT8_TRANSLATORS}
OP_MIN_INPUTS = {**MIN_INPUTS, **INT8_MIN_INPUTS}


def _check_size(shape, dtype, where: str, limit):
    """Refuses negative dims and tensors over the size limit before they are allocated."""
    from glowpy.ir.validate import check_dims, check_size
    check_dims(shape, where, allow_zero=True)
    check_size(math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize, where,
               limit if limit is not None else 4 * 1024 ** 3)


def _fill_shape(args: Args, xs, where: str) -> list[int] | None:
    """FillerOp's shape: the `shape` argument, else the input's shape (or its values with
    input_as_shape) plus `extra_shape`; None when nothing gives one."""
    if args.has("shape"):
        return args.ints("shape")
    if not xs:
        return None
    if args.i("input_as_shape", 0):
        if not xs[0].is_const or xs[0].const.ndim > 1:
            raise ModelError(f"{where}: with input_as_shape the input must be a constant 1-D "
                             "tensor (e.g. from the init net)")
        shape = [int(v) for v in xs[0].const.reshape(-1)]
    else:
        shape = list(xs[0].shape)
    return shape + args.ints("extra_shape", [])


def fill_value(op, xs, where: str, limit) -> list[np.ndarray]:
    """The constant a fill op creates, once per output."""
    args = Args(op, where)
    shape = _fill_shape(args, xs, where)
    kind = FILLS[op.type]
    if op.type == "ConstantFill":
        if args.has("dtype"):
            dt = dtype_of(args.i("dtype"), where)
        else:
            a = args.d.get("value")
            dt = np.dtype(np.int64 if a is not None and a.HasField("i") and not a.HasField("f")
                          else np.float32)
        shape = shape if shape is not None else []
        _check_size(shape, dt, where, limit)
        value = args.f("value", 0.0) if dt.kind == "f" else args.i("value", 0)
        arr = np.full(shape, value, dt)
    else:
        if op.type == "GivenTensorByteStringToUInt8Fill":
            a = args.d.get("values")
            raw = (a.strings[0] if len(a.strings) == 1 else a.s if a.HasField("s") else None) \
                if a is not None else None
            if raw is None:
                raise ModelError(f"{where}: 'values' must hold one byte string")
            values = np.frombuffer(raw, np.uint8)
        elif op.type in INT8_FILLS:
            values = int8_fill_values(op.type, args, where)
        elif not args.has("values"):
            raise ModelError(f"{where}: argument 'values' is missing")
        elif np.dtype(kind).kind == "f":
            values = np.asarray(args.floats("values"), kind)
        else:
            values = np.asarray(args.ints("values"), np.int64)
            if kind != np.bool_ and values.size and (values.min() < np.iinfo(kind).min
                                                     or values.max() > np.iinfo(kind).max):
                raise ModelError(f"{where}: values do not fit {np.dtype(kind).name}")
            values = values.astype(kind)
        shape = shape if shape is not None else [values.size]
        _check_size(shape, kind, where, limit)
        if values.size != math.prod(shape):
            raise ModelError(f"{where}: {values.size} values given for shape {list(shape)} "
                             f"({math.prod(shape)} elements)")
        arr = values.reshape(shape)
    return [arr] * max(1, len(op.output))


# -- checks -----------------------------------------------------------------------------------

def op_label(op, i: int) -> str:
    return op.name or (op.output[0] if op.output and op.output[0] else f"{op.type}_{i}")


def check_ops(predict, init):
    """Refuses unsupported operators of both nets, listing them all at once."""
    missing: dict[str, list[str]] = {}
    for net, is_init in ((init, True), (predict, False)):
        if net is None:
            continue
        for i, op in enumerate(net.op):
            if op.type in FILLS or (not is_init and op.type in OPS):
                continue
            key = f"{op.type} (in the init net)" if is_init else op.type
            missing.setdefault(key, []).append(op_label(op, i))
    if missing:
        parts, reasons = [], []
        for ty, names in sorted(missing.items()):
            why = refusal_reason(ty.split(" ")[0])
            if why and why not in reasons:
                reasons.append(why)
            shown = ", ".join(show(n, 60) for n in names[:5]) + (", ..." if len(names) > 5 else "")
            parts.append(f"{show(ty, 60)} x{len(names)} ({shown})")
        raise ModelError(f"unsupported Caffe2 operators ({sum(len(v) for v in missing.values())} "
                         "ops): " + "; ".join(parts) + "".join(f" [{r}]" for r in reasons))


def external_inputs(predict, weights: dict) -> tuple[list[str], set[str]]:
    """(candidate input names in model order, the names some operator or output reads).
    Candidates are the declared external inputs that are not weights, then blobs read before
    anything produces them."""
    order: list[str] = []
    needed: set[str] = set()
    for name in predict.external_input:
        if name not in weights and name not in order:
            order.append(name)
    produced: set[str] = set()
    for op in predict.op:
        for x in op.input:
            if x and x not in produced and x not in weights:
                needed.add(x)
                if x not in order:
                    order.append(x)
        produced.update(o for o in op.output if o)
    for o in predict.external_output:
        if o not in produced and o not in weights:
            needed.add(o)
    return order, needed


def _input_error(missing: list[str]) -> UsageError:
    names = ", ".join(repr(show(m)) for m in missing)
    return UsageError(
        f"the Caffe2 predict net reads external input(s) {names} whose type and shape Caffe2 "
        "does not record; give each one with -model-input=name,type,[d0,d1,...], e.g. "
        f"-model-input={show(missing[0])},float,[d0,d1,...] "
        "(types: float, int32, int64, bool, ...; quantized: name,int8q,scale,offset,[...])")


# -- loading ----------------------------------------------------------------------------------

def load_caffe2(paths, opts=None, warn=None) -> Graph:
    from glowpy.frontend.onnx import LoadOptions
    opts = opts or LoadOptions()
    warn = warn or (lambda m: warnings.warn(m))
    limit = getattr(opts, "max_tensor_bytes", None)
    predict_path, init_path = resolve_paths([os.fspath(p) for p in paths])
    predict = read_net(predict_path)
    init = read_net(init_path) if init_path is not None else None
    if init is not None and _is_fill_net(predict) and not _is_fill_net(init) and init.op:
        warn(f"'{show(predict_path)}' holds only fill ops and '{show(init_path)}' the computation; "
             "using them as init and predict nets (give the predict net first)")
        predict, init = init, predict
        predict_path, init_path = init_path, predict_path
    check_ops(predict, init)

    graph = Graph(predict.name or os.path.splitext(os.path.basename(predict_path.rstrip("/")))[0])
    graph.max_tensor_bytes = limit
    blobs: dict[str, object] = {}
    weights: dict[str, object] = {}
    if init is not None:
        for i, op in enumerate(init.op):
            where = f"init net operator '{show(op_label(op, i))}' ({show(op.type)})"
            missing_in = [x for x in op.input if x not in weights]
            if missing_in:
                raise ModelError(f"{where}: input blob '{show(missing_in[0])}' is not filled by an "
                                 "earlier init net operator")
            values = fill_value(op, [weights[x] for x in op.input], where, limit)
            for name, arr in zip(op.output, values):
                weights[name] = graph.constant(arr, name)
                weights[name].qparams = fill_qparams(op, where)
    blobs.update(weights)

    candidates, needed = external_inputs(predict, weights)
    bad = [n for n in opts.inputs if n in weights]
    if bad:
        raise UsageError(f"-model-input names {', '.join(repr(show(b)) for b in bad)}, which the "
                         "init net fills (a weight, not an input)")
    unknown = sorted(set(opts.inputs) - set(candidates))
    if unknown:
        raise UsageError(f"-model-input names {', '.join(repr(show(u)) for u in unknown)}, which "
                         f"the net does not read (external inputs: "
                         f"{', '.join(show(c) for c in candidates) or 'none'})")
    missing = [n for n in candidates if n in needed and n not in opts.inputs]
    if missing:
        raise _input_error(missing)
    for name in candidates:
        spec = opts.inputs.get(name)
        if spec is None:
            continue  # declared but never read
        v = graph.add_input(name, spec.dtype, spec.shape)
        if spec.scale is not None:
            info = np.iinfo(spec.dtype)
            if not (math.isfinite(spec.scale) and spec.scale > 0) or \
                    not info.min <= spec.offset <= info.max:
                raise UsageError(f"-model-input={show(name)}: scale {spec.scale} must be positive "
                                 f"and offset {spec.offset} within {info.min}..{info.max}")
            v.qparams = (spec.scale, spec.offset)
        blobs[name] = v

    unavailable: dict[str, str] = {}
    for i, op in enumerate(predict.op):
        label = op_label(op, i)
        where = f"operator '{show(label)}' ({show(op.type)})"
        xs = []
        for x in op.input:
            if x in unavailable:
                raise ModelError(f"{where}: input '{show(x)}' is {unavailable[x]}")
            if x not in blobs:
                raise ModelError(f"{where}: input blob '{show(x)}' is not produced by an earlier "
                                 "operator, the init net or an external input")
            xs.append(blobs[x])
        if not op.output or not all(op.output):
            raise ModelError(f"{where}: every operator needs named outputs")
        if op.type in FILLS:
            outs = [graph.constant(a, n)
                    for a, n in zip(fill_value(op, xs, where, limit), op.output)]
            for v in outs:
                v.qparams = fill_qparams(op, where)
        elif len(xs) < OP_MIN_INPUTS.get(op.type, 1):
            raise ModelError(f"{where}: has {len(xs)} input(s); it needs at least "
                             f"{OP_MIN_INPUTS.get(op.type, 1)}")
        else:
            outs = OPS[op.type](Ctx(graph, op, label, where, blobs), xs)
            propagate_qparams(op.type, xs, outs)
        for j, name in enumerate(op.output):
            if not name:
                continue
            if j < len(outs) and outs[j] is not None:
                blobs[name] = outs[j]
                unavailable.pop(name, None)
            else:
                blobs.pop(name, None)
                unavailable[name] = f"output {j} of {where}, which glowpy does not compute"

    if not predict.external_output:
        raise ModelError(f"the predict net '{show(predict_path)}' declares no external_output; "
                         "Caffe2 nets name their results there")
    for name in predict.external_output:
        if name in unavailable:
            raise ModelError(f"external output '{show(name)}' is {unavailable[name]}")
        if name not in blobs:
            raise ModelError(f"external output '{show(name)}' is not produced by any operator")
        graph.outputs.append(blobs[name])
    _name_outputs(graph, blobs, predict.external_output)
    graph.output_names = list(predict.external_output)
    graph.input_names = [v.name for v in graph.inputs]
    return graph


def _name_outputs(graph, blobs, names):
    """Caffe2 reuses blob names (in-place ops): the Value an external output refers to takes
    the blob's exact name, which an earlier Value of that blob may hold."""
    values = {v.name: v for n in graph.nodes for v in n.outputs}
    for name in names:
        v = blobs[name]
        if v.name == name or v in graph.inputs:
            continue
        holder = values.get(name)
        if holder is not None:
            holder.name, values[v.name] = v.name, holder
        elif name in graph._names:
            continue  # an input or a weight holds it
        graph._names.add(name)
        v.name = name
        values[name] = v
