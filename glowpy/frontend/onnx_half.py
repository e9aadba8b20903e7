"""Half-precision models (float16, bfloat16) computed in float32: a rewrite of the ModelProto
before it is translated.

Bundles keep half-precision tensors only where the model's user or the model itself asks
for that storage: graph inputs and outputs (the C application passes and receives 16-bit
values, as with Glow's Float16Ty placeholders) and the outputs of the model's own Cast or
CastLike nodes to a half type (a mixed-precision model rounds there, and so does the bundle).
Every other tensor the model declares half is computed in float32:

  * initializers, Constant and ConstantOfShape values are widened (exactly);
  * EyeLike and the random ops asked for a half dtype give float32;
  * a kept half tensor that a node other than Cast reads is converted once, by a Cast to
    float32 inserted after it, and its readers (subgraphs' outer-scope reads included) take
    the float32 one;
  * a half graph output computed by another op is computed in float32 and rounded by a Cast
    inserted before the output;
  * value_info annotations and subgraph inputs and outputs declared half become float32.

Only the Cast kernel touches half values (kernels/elementwise/arith.convert). Every other
kernel stays as it is, and where onnxruntime's CPU provider rounds each op's result to half
(its kernels for most ops are float32 ones wrapped in casts), the bundle keeps float32 between
ops: the outputs are at least as accurate, and differ from onnxruntime's by its own rounding."""
from __future__ import annotations

import numpy as np

from glowpy.frontend.onnx_checks import subgraphs

FLOAT, FLOAT16, BFLOAT16 = 1, 10, 16
HALF = (FLOAT16, BFLOAT16)
# ops whose attribute names an output element type
_DTYPE_ATTRS = {"EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                "RandomNormalLike": "dtype", "RandomUniformLike": "dtype"}


def has_half(model) -> bool:
    """Whether any tensor, value annotation or attribute of the model is half precision."""
    def graph(g) -> bool:
        vis = list(g.input) + list(g.output) + list(g.value_info)
        if any(vi.type.tensor_type.elem_type in HALF for vi in vis):
            return True
        if any(t.data_type in HALF for t in g.initializer):
            return True
        for n in g.node:
            for a in n.attribute:
                if (a.type == a.TENSOR and a.t.data_type in HALF) or \
                        (a.type == a.INT and a.i in HALF and a.name in ("to", "dtype")):
                    return True
            if n.op_type == "CastLike" or any(graph(s) for s in subgraphs(n)):
                return True
        return False
    return graph(model.graph)


def widen(model, read_tensor) -> None:
    """Rewrites a checked ModelProto in place as the module docstring says. read_tensor(t,
    where) -> np.ndarray reads a TensorProto with the loader's checks."""
    type_outputs(model)
    names = _all_names(model.graph)
    _Rewrite(names, read_tensor).graph(model.graph, top=True)


def type_outputs(model, every: bool = False) -> None:
    """Graph outputs declared without an element type get the one ONNX's type inference gives
    if it is half (a half one must stay half; where it gives none, the output is float32), or
    whatever it is with `every` (before -model-input makes an input half)."""
    g = model.graph
    if all(vi.type.tensor_type.elem_type for vi in g.output):
        return
    from onnx import shape_inference
    try:
        inferred = shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - inference is a help here; the loader checks the model
        return
    types = {vi.name: vi.type.tensor_type.elem_type for vi in
             list(inferred.input) + list(inferred.output) + list(inferred.value_info)}
    types.update({t.name: t.data_type for t in g.initializer})
    for vi in g.output:
        if not vi.type.tensor_type.elem_type and (types.get(vi.name) in HALF or every):
            vi.type.tensor_type.elem_type = types[vi.name]


def _all_names(g) -> set:
    out = {t.name for t in g.initializer} | {vi.name for vi in list(g.input) + list(g.output)}
    for n in g.node:
        out |= set(n.input) | set(n.output) | {n.name}
        for s in subgraphs(n):
            out |= _all_names(s)
    return out


class _Rewrite:
    def __init__(self, names: set, read_tensor):
        self.names = names
        self.read = read_tensor

    def fresh(self, base: str) -> str:
        name, k = f"{base}_float", 1
        while name in self.names:
            name, k = f"{base}_float{k}", k + 1
        self.names.add(name)
        return name

    def widened(self, t, where: str):
        from onnx import numpy_helper
        return numpy_helper.from_array(self.read(t, where).astype(np.float32), t.name)

    def graph(self, g, top: bool) -> None:
        from onnx import helper
        inits = {t.name: t.data_type for t in g.initializer}
        # kept half tensors of this graph: {name: elem_type}
        half = {vi.name: vi.type.tensor_type.elem_type for vi in g.input
                if top and vi.type.tensor_type.elem_type in HALF and vi.name not in inits}
        for n in g.node:
            if _is_cast(n):
                to = next((a.i for a in n.attribute if a.name == "to"), None)
                if to in HALF and n.output:
                    half[n.output[0]] = to
        self._castlike(g, half, inits)
        for t in g.initializer:
            if t.data_type in HALF:
                t.CopyFrom(self.widened(t, f"initializer '{t.name}'"))
        for n in g.node:
            self._attributes(n)
            for s in subgraphs(n):
                self.graph(s, False)
        # a kept half tensor read by something other than a Cast gets a float32 twin (a
        # subgraph's outputs are float32: its kept half ones leave through twins)
        reads = {x for vi in g.output for x in [vi.name] if not top}
        for n in g.node:
            reads |= set() if _is_cast(n) else set(n.input)
            for s in subgraphs(n):
                reads |= set(_free(s))
        twins = {x: self.fresh(x) for x in half if x in reads}
        produced = set(inits) | {x for n in g.node for x in n.output}
        # half graph outputs computed by other ops: computed in float32, then rounded
        rounded = {vi.name: (self.fresh(vi.name), _declared_half(vi)) for vi in g.output
                   if top and _declared_half(vi) and vi.name not in half and vi.name in produced}
        renamed = {o: f for o, (f, _) in rounded.items()}
        outs = {vi.name for vi in g.output} if top else set()  # the bundle's own stay half
        for vis, keep in ((g.input, half), (g.value_info, half), (g.output, outs)):
            for vi in vis:
                if vi.type.tensor_type.elem_type in HALF and vi.name not in keep:
                    vi.type.tensor_type.elem_type = FLOAT
        nodes = [helper.make_node("Cast", [x], [twins[x]], to=FLOAT, name=twins[x])
                 for x in twins if x in {vi.name for vi in g.input}]
        for n in g.node:
            for i, x in enumerate(n.output):
                n.output[i] = renamed.get(x, x)
            for i, x in enumerate(n.input):
                n.input[i] = renamed.get(x, x) if _is_cast(n) else twins.get(x, renamed.get(x, x))
            for s in subgraphs(n):
                _rename_free(s, {**twins, **renamed})
            nodes.append(n)
            nodes += [helper.make_node("Cast", [x], [twins[x]], to=FLOAT, name=twins[x])
                      for x in n.output if x in twins]
        for t in g.initializer:  # an initializer that is a half graph output
            t.name = renamed.get(t.name, t.name)
        nodes += [helper.make_node("Cast", [f], [o], to=et, name=o) for o, (f, et) in rounded.items()]
        if not top:
            for vi in g.output:
                vi.name = twins.get(vi.name, vi.name)
        del g.node[:]
        g.node.extend(nodes)

    @staticmethod
    def _castlike(g, half: dict, inits: dict) -> None:
        """CastLike to a half tensor (kept, or a half initializer) is a Cast to its type;
        repeated until no more are found (CastLike of a CastLike's output)."""
        from onnx import helper
        changed = True
        while changed:
            changed = False
            for n in g.node:
                if n.op_type != "CastLike" or n.domain not in ("", "ai.onnx") or \
                        len(n.input) < 2 or not n.output:
                    continue
                like = n.input[1]
                et = half.get(like) or (inits.get(like) if inits.get(like) in HALF else None)
                if et is None:
                    continue
                n.op_type = "Cast"
                del n.input[1:]
                keep = [a for a in n.attribute if a.name == "saturate"]
                del n.attribute[:]
                n.attribute.extend(keep)
                n.attribute.append(helper.make_attribute("to", et))
                half[n.output[0]] = et
                changed = True

    def _attributes(self, n) -> None:
        for a in n.attribute:
            if a.type == a.TENSOR and a.t.data_type in HALF:
                a.t.CopyFrom(self.widened(a.t, f"node '{n.name}' attribute '{a.name}'"))
            elif a.type == a.INT and a.name == _DTYPE_ATTRS.get(n.op_type) and a.i in HALF:
                a.i = FLOAT


def _is_cast(n) -> bool:
    return n.op_type == "Cast" and n.domain in ("", "ai.onnx")


def _declared_half(vi) -> int | None:
    et = vi.type.tensor_type.elem_type
    return et if et in HALF else None


def _free(g) -> list:
    """The outer-scope names a subgraph reads."""
    from glowpy.frontend.onnx_checks import free_names
    defined = {t.name for t in g.initializer} | {vi.name for vi in g.input}
    free = set()
    for m in g.node:
        free |= {x for x in list(m.input) + free_names(m) if x and x not in defined}
        defined |= set(m.output)
    free |= {vi.name for vi in g.output if vi.name not in defined}
    return sorted(free)


def _rename_free(g, mapping: dict) -> None:
    """Renames a subgraph's reads of outer-scope tensors (not the names it defines itself)."""
    defined = {t.name for t in g.initializer} | {vi.name for vi in g.input}
    defined |= {x for m in g.node for x in m.output}
    live = {k: v for k, v in mapping.items() if k not in defined}
    if not live:
        return
    for m in g.node:
        for i, x in enumerate(m.input):
            if x in live:
                m.input[i] = live[x]
        for s in subgraphs(m):
            _rename_free(s, live)
    for vi in g.output:
        if vi.name in live:
            vi.name = live[vi.name]
