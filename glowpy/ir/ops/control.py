"""If, Loop and Scan: declared here so that the op list, the unsupported-op check and the
conformance runner know them; the ONNX loader replaces them by plain nodes while reading the
model (glowpy/frontend/onnx_control.py: branch inlining, select, unrolling), so no node of
these ops ever reaches the graph."""
from __future__ import annotations

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, register


class Control(Op):
    traits = frozenset({"nofold"})

    def infer(self, node):
        raise ModelError(f"node '{node.name}' ({node.op}): control flow is translated by the ONNX "
                         "loader and cannot be added to a graph directly")


@register
class If(Control):
    inputs = ("cond",)
    attrs = {"then_branch": None, "else_branch": None}


@register
class Loop(Control):
    inputs = ("M?", "cond?", "v_initial*")
    attrs = {"body": None}
    const_inputs = (0, 1)  # the trip count and the first condition: unrolled at compile time


@register
class Scan(Control):
    inputs = ("initial_state_and_scan_inputs*",)
    attrs = {"body": None, "num_scan_inputs": None, "scan_input_directions": None,
             "scan_output_directions": None, "scan_input_axes": None, "scan_output_axes": None}
