"""If, Loop and Scan: ONNX ops whose attributes are subgraphs. An ahead-of-time bundle has no
control flow, so each becomes plain nodes of the outer graph while the model is read:

- If with a condition known at compile time (a constant, or folded to one by Graph.add) is
  replaced by its taken branch; with a run-time condition both branches are computed and a
  Where selects, when they are cheap and agree in shape and type; otherwise one error.
- Loop with a compile-time trip count (and a condition that stays constant) and Scan are
  unrolled: the body is translated once per iteration, scan outputs are concatenated.

A subgraph is translated in a scope of its own (a ChainMap over the outer scope), so its
names shadow outer ones and never collide: Values get unique names from Graph.unique_name,
nodes are named '<outer node>/<inner node>' ('/<iteration>' in loops)."""
from __future__ import annotations

from collections import ChainMap

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.frontend.onnx_checks import free_names, node_label, order_graph

CONTROL_OPS = ("If", "Loop", "Scan")
# Unrolling bounds: a loop body is translated once per iteration (the voice and detector
# models' loops run 1..64 times); beyond these the bundle's code would grow without end.
MAX_ITERATIONS = 4096
MAX_UNROLLED_NODES = 20000
# All subgraph nodes translated for one model, folded ones included: nested loops whose bodies
# fold away add no node to the graph but still cost translation time (3 nested loops of 4096
# would be 7e10 translations); a 4096-step loop of a 12-node body stays below.
MAX_TRANSLATED = 50000
# A run-time If computes both branches; the If nodes of the models in the issue are a few
# shape or constant checks, so a branch adding more nodes than this is not "cheap".
MAX_SELECT_NODES = 16


def _advice(names) -> str:
    return f"compile the model up to its inputs with -model-outputs={','.join(show(x, 60) for x in names)}"


def _data_dependent(where: str, what: str, names) -> ModelError:
    return ModelError(f"{where}: {what} is data-dependent; {_advice(names)}")


def _graph_attr(n, key: str, where: str):
    for a in n.attribute:
        if a.name == key:
            if a.type != a.GRAPH:
                raise ModelError(f"{where}: attribute '{key}' must be a graph")
            return a.g
    raise ModelError(f"{where}: missing required attribute '{key}'")


def _plain_attrs(ctx, n, where: str) -> dict:
    return {a.name: ctx.attribute(a, where) for a in n.attribute
            if a.type not in (a.GRAPH, a.GRAPHS)}


def run_subgraph(ctx, sub, bindings: list, values, prefix: str, where: str) -> list:
    """Translates subgraph `sub` with its formal inputs bound to `bindings` (Values) in a scope
    over `values`; returns the Values of its outputs."""
    if len(bindings) != len(sub.input):
        raise ModelError(f"{where}: its subgraph '{show(sub.name)}' has {len(sub.input)} inputs, "
                         f"the op gives it {len(bindings)}")
    key = id(sub)
    if key not in ctx.sub_constants:  # read once, whatever the number of iterations
        ctx.sub_constants[key] = {t.name: ctx.graph.constant(ctx.tensor(
            t, f"{where}: initializer '{show(t.name)}'"), t.name) for t in sub.initializer}
        produced = {o for m in sub.node for o in m.output}
        own = {vi.name for vi in sub.input} | {t.name for t in sub.initializer}
        # outer names a node of the subgraph redefines are shadowed, not duplicated
        order = order_graph(sub, own | (set(values) - produced), f"{where}: subgraph "
                            f"'{show(sub.name)}'")
        ctx.sub_constants[(key, "order")] = order
    scope = ChainMap({}, values)
    scope.update(ctx.sub_constants[key])
    for vi, v in zip(sub.input, bindings):
        scope[vi.name] = v
    order = ctx.sub_constants[(key, "order")]
    ctx.sub_constants["translated"] = ctx.sub_constants.get("translated", 0) + len(order)
    if ctx.sub_constants["translated"] > MAX_TRANSLATED:
        raise ModelError(f"{where}: its subgraphs unroll to more than {MAX_TRANSLATED} nodes in "
                         "all; the control flow is too large to unroll ahead of time")
    for i in order:
        m = sub.node[i]
        ctx.translate(m, f"{prefix}/{node_label(m, i)}", scope)
    return [scope[vi.name] for vi in sub.output]


def translate(ctx, n, name: str, where: str, inputs: list, values) -> list:
    return {"If": _if, "Loop": _loop, "Scan": _scan}[n.op_type](ctx, n, name, where, inputs, values)


def _scalar_bool(v, where: str, what: str):
    if v.size != 1:
        raise ModelError(f"{where}: {what} must hold one element, got shape {list(v.shape)}")
    return bool(np.asarray(v.const).reshape(-1)[0]) if v.is_const else None


def _if(ctx, n, name, where, inputs, values):
    cond = inputs[0]
    taken = _scalar_bool(cond, where, "the condition")
    branches = [_graph_attr(n, "then_branch", where), _graph_attr(n, "else_branch", where)]
    if taken is not None:
        return run_subgraph(ctx, branches[0 if taken else 1], [], values, name, where)
    graph = ctx.graph
    reads = [n.input[0]] + [x for x in free_names(n) if x in values and not values[x].is_const]
    what = f"its condition '{show(n.input[0], 60)}'"
    outs = []
    for label, sub in zip(("then", "else"), branches):
        before = len(graph.nodes)
        try:
            outs.append(run_subgraph(ctx, sub, [], values, f"{name}/{label}", where))
        except ModelError as e:
            raise _data_dependent(where, f"{what} (and the {label} branch cannot be computed "
                                  f"beside the other: {e})", reads) from None
        added = len(graph.nodes) - before
        if added > MAX_SELECT_NODES:
            raise _data_dependent(where, f"{what} (and the {label} branch is too large to compute "
                                  f"both: {added} nodes, at most {MAX_SELECT_NODES})", reads)
    c = graph.add("Reshape", [cond, graph.constant(np.zeros(0, np.int64), "scalar_shape")],
                  name=f"{name}/cond")[0]
    result = []
    for k, (t, e) in enumerate(zip(*outs)):
        if t.dtype != e.dtype or t.shape != e.shape:
            raise _data_dependent(where, f"{what} (and output {k} is {t.dtype.name}{list(t.shape)} "
                                  f"in one branch, {e.dtype.name}{list(e.shape)} in the other)", reads)
        out_name = n.output[k] if k < len(n.output) and n.output[k] else f"{name}_out{k}"
        result += graph.add("Where", [c, t, e], name=f"{name}/select{k}", out_names=[out_name])
    return result


def _stack(ctx, parts: list, axis: int, name: str, out_name: str):
    """Concatenates per-iteration values along a new axis `axis`."""
    graph = ctx.graph
    shape = parts[0].shape
    axis = axis + len(shape) + 1 if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise ModelError(f"{name}: scan output axis {axis} is out of range for rank {len(shape)}")
    new = graph.constant(np.array(shape[:axis] + (1,) + shape[axis:], np.int64), "stack_shape")
    rows = [graph.add("Reshape", [p, new], name=f"{name}/unsqueeze{i}")[0] for i, p in enumerate(parts)]
    if len(rows) == 1:
        return rows[0]
    return graph.add("Concat", rows, {"axis": axis}, name=f"{name}/stack", out_names=[out_name])[0]


def _check_growth(ctx, start: int, it: int, where: str):
    added = len(ctx.graph.nodes) - start
    if it > MAX_ITERATIONS or added > MAX_UNROLLED_NODES:
        raise ModelError(f"{where}: unrolling stopped after {it} iterations and {added} nodes (at "
                         f"most {MAX_ITERATIONS} iterations and {MAX_UNROLLED_NODES} nodes); "
                         "the loop is too long to unroll ahead of time")


def _loop(ctx, n, name, where, inputs, values):
    body = _graph_attr(n, "body", where)
    trip, cond0 = inputs[0], (inputs[1] if len(inputs) > 1 else None)
    carried = inputs[2:]
    reads = [x for x in n.input[:2] if x]
    if trip is not None and not trip.is_const:
        raise _data_dependent(where, f"its trip count '{show(n.input[0], 60)}'", reads)
    if cond0 is not None and not cond0.is_const:
        raise _data_dependent(where, f"its condition '{show(n.input[1], 60)}'", reads)
    count = None if trip is None else int(np.asarray(trip.const).reshape(-1)[0])
    go = True if cond0 is None else _scalar_bool(cond0, where, "the condition")
    n_carried = len(carried)
    if len(body.output) < 1 + n_carried:
        raise ModelError(f"{where}: its body has {len(body.output)} outputs; it needs the "
                         f"condition and {n_carried} loop-carried values")
    graph, start = ctx.graph, len(ctx.graph.nodes)
    scans: list[list] = [[] for _ in range(len(body.output) - 1 - n_carried)]
    it = 0
    while go and (count is None or it < count):
        bind = [graph.constant(np.array(it, np.int64), "iteration"),
                graph.constant(np.array(True), "cond")] + list(carried)
        outs = run_subgraph(ctx, body, bind, values, f"{name}/{it}", where)
        go = _scalar_bool(outs[0], where, "the body's condition output")
        if go is None:
            raise _data_dependent(where, "the condition that ends it", [x for x in n.input if x])
        carried = outs[1:1 + n_carried]
        for acc, v in zip(scans, outs[1 + n_carried:]):
            acc.append(v)
        it += 1
        _check_growth(ctx, start, it, where)
    if scans and it == 0:
        raise ModelError(f"{where}: runs no iteration, so its scan outputs are empty tensors, "
                         "which bundles do not hold")
    for acc in scans:
        if any(v.shape != acc[0].shape for v in acc):
            raise ModelError(f"{where}: a scan output changes shape between iterations "
                             f"({list(acc[0].shape)}, ...); it cannot be concatenated")
    outs = list(carried) + [_stack(ctx, acc, 0, f"{name}/scan{k}", _out(n, n_carried + k, name))
                            for k, acc in enumerate(scans)]
    return outs


def _out(n, k: int, name: str) -> str:
    return n.output[k] if k < len(n.output) and n.output[k] else f"{name}_out{k}"


def _scan(ctx, n, name, where, inputs, values):
    body = _graph_attr(n, "body", where)
    a = _plain_attrs(ctx, n, where)
    m = int(a["num_scan_inputs"])
    if ctx.opset < 9:
        return _scan8(ctx, n, body, a, m, name, where, inputs, values)
    n_state = len(inputs) - m
    if not 0 < m <= len(inputs):
        raise ModelError(f"{where}: num_scan_inputs={m} but the node has {len(inputs)} inputs")
    k_out = len(body.output) - n_state
    spec = [list(a.get(key) or [0] * count) for key, count in
            (("scan_input_directions", m), ("scan_input_axes", m),
             ("scan_output_directions", k_out), ("scan_output_axes", k_out))]
    return _scan_steps(ctx, body, inputs[:n_state], inputs[n_state:], *spec, _names(n, name),
                       name, where, values)


def _names(n, name):
    return [_out(n, k, name) for k in range(len(n.output))]


def _scan8(ctx, n, body, a, m, name, where, inputs, values):
    """Opset 8: a batch axis 0 in front of every state and scan input (the scan axis is 1),
    and optional sequence_lens, supported when it is absent or equals the full length."""
    lens, rest = inputs[0], inputs[1:]
    n_state = len(rest) - m
    if not 0 < m <= len(rest):
        raise ModelError(f"{where}: num_scan_inputs={m} but the node has {len(rest)} data inputs")
    if len(rest[n_state].shape) < 2:
        raise ModelError(f"{where}: opset-8 scan inputs need a batch and a sequence axis")
    batch, steps = rest[n_state].shape[:2]
    if lens is not None and not (lens.is_const and (np.asarray(lens.const) == steps).all()):
        raise ModelError(f"{where}: sequence_lens shorter than the scan inputs are not supported "
                         "(give every sequence its full length)")
    dirs = list(a.get("directions") or [0] * m)
    k_out = len(body.output) - n_state
    graph, per_batch = ctx.graph, []
    for i in range(batch):
        pick = [graph.add("Gather", [v, graph.constant(np.array(i, np.int64), "batch")], {"axis": 0},
                          name=f"{name}/b{i}/pick{j}")[0] for j, v in enumerate(rest)]
        per_batch.append(_scan_steps(ctx, body, pick[:n_state], pick[n_state:], dirs, [0] * m,
                                     [0] * k_out, [0] * k_out, _names(n, f"{name}/b{i}"),
                                     f"{name}/b{i}", where, values))
    return [_stack(ctx, [outs[k] for outs in per_batch], 0, f"{name}/batch{k}", out)
            for k, out in enumerate(_names(n, name))]


def _scan_steps(ctx, body, state, xs, in_dirs, in_axes, out_dirs, out_axes, out_names, name,
                where, values):
    """Unrolls a Scan-9 over its scan inputs `xs`; returns the final states, then the scan
    outputs."""
    m, k_out = len(xs), len(out_dirs)
    if len(in_dirs) != m or len(in_axes) != m or len(out_axes) != k_out:
        raise ModelError(f"{where}: scan_input_*/scan_output_* attributes must have one entry "
                         f"per scan input ({m}) and scan output ({k_out})")
    axes = []
    for x, ax in zip(xs, in_axes):
        r = len(x.shape)
        if not -r <= ax < r:
            raise ModelError(f"{where}: scan input axis {ax} is out of range for rank {r}")
        axes.append(ax % r)
    lengths = {x.shape[ax] for x, ax in zip(xs, axes)}
    if len(lengths) != 1:
        raise ModelError(f"{where}: its scan inputs have different lengths {sorted(lengths)} "
                         "along their scan axes")
    length = lengths.pop()
    if length > MAX_ITERATIONS:
        _check_growth(ctx, len(ctx.graph.nodes), length, where)
    graph, start = ctx.graph, len(ctx.graph.nodes)
    n_state = len(state)
    per_step: list[list] = [[] for _ in range(k_out)]
    for t in range(length):
        slices = [graph.add("Gather", [x, graph.constant(np.array(t if d == 0 else length - 1 - t,
                                                                  np.int64), "step")],
                            {"axis": ax}, name=f"{name}/{t}/in{j}")[0]
                  for j, (x, ax, d) in enumerate(zip(xs, axes, in_dirs))]
        outs = run_subgraph(ctx, body, list(state) + slices, values, f"{name}/{t}", where)
        state = outs[:n_state]
        for acc, v in zip(per_step, outs[n_state:]):
            acc.append(v)
        _check_growth(ctx, start, t + 1, where)
    result = list(state)
    for k, (acc, d, ax) in enumerate(zip(per_step, out_dirs, out_axes)):
        result.append(_stack(ctx, acc[::-1] if d else acc, ax, f"{name}/scan{k}",
                             out_names[n_state + k]))
    return result
