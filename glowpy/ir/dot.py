"""Graphviz DOT text of a graph (-dump-graph-DAG). Labels are escaped model strings."""
from glowpy.ir import epilogue
from glowpy.ir.graph import Graph


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: Graph, node_attrs=None, constants: bool = True) -> str:
    """node_attrs(i, node) -> {DOT attribute: text} adds attributes to node i (the report's
    ids, tooltips and links); constants=False leaves constant operands out (their long names
    widen the picture; the report's tooltips give their shapes)."""
    lines = [f"digraph {_q(graph.name)} {{", "  rankdir=TB;", "  node [shape=record, fontsize=10];"]
    ids = {}

    def vid(v):
        if v not in ids:
            ids[v] = f"v{len(ids)}"
            kind = "input" if v in graph.inputs else "output" if v in graph.outputs else \
                "constant" if v.is_const else ""
            if kind or v.producer is None:
                lines.append(f"  {ids[v]} [shape=box, style=filled, fillcolor="
                             f"{'lightblue' if kind != 'constant' else 'gray90'}, label="
                             f"{_q(f'{kind} {v.name}|{v.dtype.name}{list(v.shape)}')}];")
        return ids[v]

    for v in graph.inputs:
        vid(v)
    for i, n in enumerate(graph.nodes):
        attrs = ", ".join(f"{k}={v}" for k, v in n.attrs.items()
                          if v is not None and not k.startswith("_") and k != "value")
        outs = ", ".join(f"{o.dtype.name}{list(o.shape)}" for o in n.outputs)
        op = epilogue.label(n)  # fused epilogue steps show as Conv+Add+Relu
        more = "".join(f", {k}={_q(v)}" for k, v in (node_attrs(i, n) if node_attrs else {}).items())
        lines.append(f"  n{i} [label={_q(f'{{{op}|{n.name}|{attrs}|{outs}}}')}{more}];")
        for v in n.inputs:
            if v is None or (not constants and v.is_const and v.producer not in graph.nodes):
                continue
            src = f"n{graph.nodes.index(v.producer)}" if v.producer in graph.nodes else vid(v)
            lines.append(f"  {src} -> n{i};")
    for v in graph.outputs:
        o = vid(v)
        if v.producer in graph.nodes:
            lines.append(f"  n{graph.nodes.index(v.producer)} -> {o};")
    lines.append("}")
    return "\n".join(lines) + "\n"
