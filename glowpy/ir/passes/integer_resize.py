"""Resize (and Upsample) in linear mode of int8/uint8 data as Cast -> float Resize -> Cast.

quantize_static's QOperator format passes quantized tensors through Resize (an upsampling
decoder, a segmentation head), and onnxruntime interpolates them in float and truncates toward
zero (measured with onnxruntime 1.32, every coordinate transformation mode, int8 and uint8:
equal to float interpolation then truncation, where rounding to nearest would differ in 40-50%
of the outputs). The resampling kernels interpolate float data; a linear interpolation never
leaves the range of its input, so the truncating Cast back cannot overflow. Required at -O0:
no kernel interpolates integers."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph, Value
from glowpy.ir.passes.util import insert_node


def integer_resize(graph: Graph) -> Graph:
    for n in list(graph.nodes):
        x = n.inputs[0] if n.inputs else None
        if n.op not in ("Resize", "Upsample") or n.attrs["mode"] == "nearest" or \
                x.dtype.kind not in "iu" or x.dtype.itemsize != 1:
            continue
        at = graph.nodes.index(n)
        n.inputs[0] = insert_node(graph, "Cast", [x], {"to": np.dtype(np.float32)},
                                  f"{n.name}/float", at, out_name=f"{n.name}_float_in")
        y = n.outputs[0]
        yf = Value(graph.unique_name(f"{n.name}_float_out"), np.dtype(np.float32), y.shape,
                   producer=n)
        n.outputs = [yf]
        insert_node(graph, "Cast", [yf], {"to": y.dtype}, f"{n.name}/truncate", at + 2, out=y)
    return graph
