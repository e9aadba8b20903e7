"""The "naive liveness bound" of an ONNX model, the yardstick of the memory planner.

Walking the nodes in the model's own order, a tensor is live from the node that produces it to
its last reader; the bound is the largest sum of the sizes of the live intermediate tensors
(each rounded up to 64 bytes; graph inputs, outputs and initializers not counted). It is what
a planner that keeps the model's order, copies at every view and fuses nothing would need at
best. Shapes come from ONNX shape inference with symbolic dimensions set to 1 (or `symbols`)."""
from __future__ import annotations

import numpy as np


def _align(n: int) -> int:
    return (n + 63) // 64 * 64


def naive_liveness_bound(path: str, symbols: dict | None = None) -> int:
    import onnx
    from onnx import helper, shape_inference
    model = onnx.load(path)
    symbols = symbols or {}
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value") or d.dim_value <= 0:
                value = symbols.get(d.dim_param, 1)
                d.Clear()
                d.dim_value = value
    # Shape inference types an IR < 4 model's initializers only through graph.input, which
    # that IR requires to list them; onnxruntime runs models that do not (the shared mnist8:
    # its Reshape of a weight got no type, nor did any tensor after it). Value_info entries
    # without a shape are dropped so that inference fills them in.
    listed = {i.name for i in model.graph.input}
    model.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                             for t in model.graph.initializer if t.name not in listed)
    typed = [v for v in model.graph.value_info if v.type.tensor_type.HasField("shape")]
    del model.graph.value_info[:]
    model.graph.value_info.extend(typed)
    model = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    g = model.graph
    info = {v.name: v for v in list(g.value_info) + list(g.output) + list(g.input)}
    outputs = {o.name for o in g.output}
    inputs = {i.name for i in g.input}

    def size(name: str) -> int:
        if name not in info:
            raise ValueError(f"{path}: shape inference gives no type for tensor '{name}'")
        t = info[name].type.tensor_type
        dims = [d.dim_value for d in t.shape.dim]
        item = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
        return _align(int(np.prod(dims, dtype=np.int64)) * item)

    produced, last = {}, {}
    for i, n in enumerate(g.node):
        for x in n.input:
            last[x] = i
        for o in n.output:
            if o and o not in outputs and o not in inits and o not in inputs:
                produced[o] = i
    sizes = {t: size(t) for t in produced}
    peak = 0
    for i in range(len(g.node)):
        peak = max(peak, sum(s for t, s in sizes.items() if produced[t] <= i <= last.get(t, produced[t])))
    return peak
