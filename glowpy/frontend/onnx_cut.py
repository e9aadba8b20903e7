"""Compiling part of a model: `-model-outputs=a,b` and `-model-inputs=c,d`.

The named tensors of the main graph become the bundle's outputs (its inputs); the nodes that
the outputs do not need, and the nodes before the new inputs, are dropped from the ONNX graph
before anything is translated, so an op only they use (a detector's data-dependent NonZero
post-processing, a preprocessing step glowpy does not support) is never looked at. This is
PPLNN's partial execution and onnx.utils.Extractor's cut, done on the loaded model: nothing is
written next to the model.

A new input's element type and shape come from `-model-input=name,type,[dims]` when given,
else from the model's value_info, else from ONNX shape inference; without any of them the cut
is refused with the -model-input to give. Bundle inputs are the original inputs the kept
nodes still read, in their model order, then the new ones in the order given."""
from __future__ import annotations

from glowpy.errors import UsageError, show
from glowpy.frontend.onnx_checks import _declared_type, free_names


def _names(option: str, names: list[str]) -> list[str]:
    seen = []
    for n in names:
        if not n:
            raise UsageError(f"-{option}: an empty tensor name; give names separated by commas")
        if n in seen:
            raise UsageError(f"-{option}: '{show(n)}' is given more than once")
        seen.append(n)
    return seen


def _typed(model, names: set, given: dict) -> dict:
    """name -> ValueInfoProto with a tensor type, for the cut inputs not given by -model-input."""
    infos = {vi.name: vi for vi in list(model.graph.value_info) + list(model.graph.output)}
    found = {n: infos[n] for n in names if n in infos and _declared_type(infos[n])[1] is not None}
    missing = names - set(found) - set(given)
    if missing:
        import onnx
        try:  # (a model onnx cannot infer is no error here: the user can give the types)
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
            for vi in inferred.graph.value_info:
                if vi.name in missing and _declared_type(vi)[1] is not None:
                    found[vi.name] = vi
        except Exception:  # noqa: BLE001 - onnx raises many kinds; the refusal below says what to do
            pass
    return found


def cut(model, outputs: list[str], inputs: list[str], given: dict):
    """Keeps what `outputs` (default: the model's outputs) need, starting from `inputs` (plus
    the model's inputs). `given`: the -model-input specs by name. Changes `model` in place."""
    import onnx
    g = model.graph
    outputs = _names("model-outputs", outputs)
    inputs = _names("model-inputs", inputs)
    producer = {}
    for i, n in enumerate(g.node):
        for o in n.output:
            if o:
                producer[o] = i
    graph_inputs = [vi.name for vi in g.input]
    initializers = {t.name for t in g.initializer}
    for option, names in (("model-outputs", outputs), ("model-inputs", inputs)):
        unknown = [n for n in names if n not in producer]
        if unknown:
            what = ("a graph input" if unknown[0] in graph_inputs else
                    "an initializer" if unknown[0] in initializers else "no tensor")
            raise UsageError(f"-{option}: '{show(unknown[0])}' is {what} of the model's main "
                             "graph; name tensors that nodes of the main graph compute")
    both = set(inputs) & set(outputs)
    if both:
        raise UsageError(f"-model-inputs and -model-outputs both name '{show(sorted(both)[0])}'")
    targets = outputs or [vi.name for vi in g.output]
    starts = set(inputs)
    needed, keep, stack = set(), set(), list(targets)
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        if name in starts or name not in producer:
            continue
        i = producer[name]
        if i not in keep:
            keep.add(i)
            n = g.node[i]
            stack.extend(x for x in list(n.input) + free_names(n) if x)
    unused = [n for n in inputs if n not in needed]
    if unused:
        raise UsageError(f"-model-inputs: the outputs do not depend on '{show(unused[0])}'")
    for i in keep:  # a kept node computing a new input: the input would have two producers
        clash = [o for o in g.node[i].output if o in starts]
        if clash:
            raise UsageError(f"-model-inputs: '{show(clash[0])}' is computed by node "
                             f"'{show(g.node[i].name or clash[0])}', which the outputs also need "
                             "for its other results; cut after that node instead")
    typed = _typed(model, set(inputs), given)
    untyped = [n for n in inputs if n not in typed and n not in given]
    if untyped:
        raise UsageError(f"-model-inputs: the type and shape of '{show(untyped[0])}' are not known "
                         f"before compiling; give them with -model-input={show(untyped[0])},"
                         "float,[d0,d1,...]")
    new_inputs = [vi for vi in g.input if vi.name in needed or vi.name in initializers]
    for n in inputs:
        vi = onnx.ValueInfoProto()
        if n in typed:
            vi.CopyFrom(typed[n])
        else:
            vi.name = n  # its type comes from -model-input
        new_inputs.append(vi)
    declared = {vi.name: vi for vi in g.output}
    new_outputs = []
    for n in targets:
        vi = onnx.ValueInfoProto()
        if n in declared:
            vi.CopyFrom(declared[n])
        else:
            vi.name = n  # glowpy infers its type
        new_outputs.append(vi)
    nodes = [g.node[i] for i in sorted(keep)]
    del g.node[:]
    g.node.extend(nodes)
    del g.input[:]
    g.input.extend(new_inputs)
    del g.output[:]
    g.output.extend(new_outputs)
    return model
