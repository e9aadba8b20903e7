"""Model validation that does not depend on the file format: graph wiring (duplicate producers,
dangling references, cycles), dimensions, and sizes against the target's address space.

Everything here runs before code is generated, and the size checks run before anything of that
size is allocated: a hostile model that declares a 10^12-element tensor is refused from its
declared shape, not by running out of memory while folding it."""
from __future__ import annotations

import math

import numpy as np

from glowpy.errors import ModelError, UsageError, show

GIB = 1 << 30
# a 64-bit target could address more, but the compiler holds constants in memory while it
# folds and writes them: 4 GiB is the default ceiling there (raise it with -max-region-size)
DEFAULT_CAP_64 = 4 * GIB


def address_space_limit(pointer_bits: int) -> int:
    """The largest region a target can address: offsets are signed pointer-sized integers."""
    return (1 << (pointer_bits - 1)) - 1


def default_limit(pointer_bits: int) -> int:
    return min(address_space_limit(pointer_bits), DEFAULT_CAP_64)


def parse_size(text: str, option: str = "max-region-size") -> int:
    """'4096', '64K', '512M', '2G' (binary multiples) -> bytes."""
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    digits = t[:-1] if mult > 1 else t
    if not (digits.isascii() and digits.isdigit()) or int(digits) <= 0:
        raise UsageError(f"-{option}={show(text)}: expected a positive byte count such as "
                         "65536, 512K, 64M or 2G")
    return int(digits) * mult


def resolve_limit(requested: int | str | None, pointer_bits: int) -> int:
    """The size limit in bytes for a target: the request, or the default."""
    top = address_space_limit(pointer_bits)
    if requested is None:
        return default_limit(pointer_bits)
    if isinstance(requested, str):
        requested = parse_size(requested)
    if not isinstance(requested, int) or requested <= 0:
        raise UsageError(f"-max-region-size={requested!r}: expected a positive byte count")
    if requested > top:
        raise UsageError(f"-max-region-size={requested}: larger than the {pointer_bits}-bit "
                         f"target can address ({top} bytes)")
    return requested


def tensor_bytes(dtype, shape) -> int:
    """Exact byte size in Python integers (numpy's int64 products overflow silently)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


# numpy (constant folding, the op references) holds at most 64 dims and kernels nest one loop
# per dim; ONNX models use up to 8. A rank from a model's constants (ConstantOfShape of a
# 200000-element shape, Unsqueeze with 100000 axes) is refused before any work of that size
MAX_RANK = 32


def check_rank(rank: int, where: str):
    if rank > MAX_RANK:
        raise ModelError(f"{where} has {rank} dimensions; at most {MAX_RANK} are supported")


def check_dims(shape, where: str, allow_zero: bool = False):
    """Refuses more than MAX_RANK dims and negative (and unless allowed, zero) dimensions."""
    check_rank(len(shape), where)
    for i, d in enumerate(shape):
        if d < 0 or (d == 0 and not allow_zero):
            raise ModelError(f"{where}: dimension {i} is {d} in {list(shape)}; tensors with "
                             f"{'negative' if d < 0 else 'zero'} dimensions are not supported")


def check_size(nbytes: int, where: str, limit: int | None):
    if limit is not None and nbytes > limit:
        raise ModelError(f"{where} needs {nbytes} bytes, more than the limit of {limit} bytes "
                         "(the target's address space, or -max-region-size)")


def check_output_sizes(graph, node, types):
    """Graph.add's gate, after inference and before anything is folded (allocated): every
    output fits the graph's size limit."""
    limit = getattr(graph, "max_tensor_bytes", None)
    if limit is None:
        return
    for i, (dt, shape) in enumerate(types):
        # a zero dimension makes the size 0 whatever the others are, but numpy still refuses
        # to allocate [4, 0, 2**63-1] (fuzz, seed 27): every dimension alone must fit too
        widest = max((int(d) for d in shape), default=0)
        if len(shape) <= MAX_RANK and tensor_bytes(dt, shape) <= limit and \
                widest * np.dtype(dt).itemsize <= limit:
            continue  # the messages below escape the node's name: only build them to raise
        check_rank(len(shape), f"node '{show(node.name)}' ({node.op}): output {i}")
        where = f"node '{show(node.name)}' ({node.op}): output {i} {np.dtype(dt).name}{list(shape)}"
        check_size(tensor_bytes(dt, shape), where, limit)
        if widest * np.dtype(dt).itemsize > limit:
            raise ModelError(f"{where}: dimension {widest} alone needs more than the limit of "
                             f"{limit} bytes (the target's address space, or -max-region-size)")


# Folded constants are stored in the bundle's weights (and 6 times over in NAME.weights.txt),
# and folding holds several copies in memory: a 100-byte ConstantOfShape of 256 MiB took 1.2 GB
# of memory and 1.8 GB of disk, so one of 4 GiB (under the size limit) would exhaust both. A
# fold that expands its constant inputs more than FOLD_RATIO times past FOLD_BYTES is refused.
FOLD_BYTES = 64 << 20
FOLD_RATIO = 64


def check_fold(node, types):
    """Before a node whose inputs are all constant is folded (Graph.add, the fold pass)."""
    if not all(v is None or v.is_const for v in node.inputs):
        return
    out = sum(tensor_bytes(dt, shape) for dt, shape in types)
    given = sum(int(v.const.nbytes) for v in node.inputs if v is not None)
    if out > FOLD_BYTES and out > FOLD_RATIO * given:
        raise ModelError(f"node '{show(node.name)}' ({node.op}): its outputs would be a "
                         f"{out}-byte constant computed from {given} bytes of constant inputs; "
                         f"constants are stored in the bundle's weights, and glowpy folds none "
                         f"over {FOLD_BYTES} bytes that is more than {FOLD_RATIO} times its inputs")


def check_regions(sizes: dict, limit: int | None):
    """Planned region sizes (bytes) against the limit."""
    for region, n in sizes.items():
        check_size(n, f"the {region} region", limit)


def order_nodes(nodes, available, outputs, what: str = "graph") -> list[int]:
    """Wiring check for a list of nodes given as (label, input names, output names), where
    `available` are names defined before any node (graph inputs, initializers) and '' is an
    omitted optional input. Refuses tensors produced twice, references to tensors nothing
    produces (all listed), graph outputs nothing produces, and cycles (naming the nodes on
    one). Returns an execution order: the given order when it is already topological."""
    producer: dict[str, int] = {}
    dup = []
    for i, (label, _, outs) in enumerate(nodes):
        for o in outs:
            if not o:
                continue
            if o in producer or o in available:
                dup.append(f"'{show(o)}' (node '{show(label)}')")
            producer[o] = i
    if dup:
        raise ModelError(f"{what}: {len(dup)} tensor(s) defined more than once: "
                         f"{', '.join(dup[:5])}{', ...' if len(dup) > 5 else ''}; every tensor "
                         "must have exactly one producer")
    dangling = []
    for label, ins, _ in nodes:
        for x in ins:
            if x and x not in producer and x not in available:
                dangling.append(f"'{show(x)}' (input of node '{show(label)}')")
    for o in outputs:
        if o not in producer and o not in available:
            dangling.append(f"'{show(o)}' (graph output)")
    if dangling:
        raise ModelError(f"{what}: {len(dangling)} reference(s) to tensors that no node, "
                         f"initializer or graph input defines: {', '.join(dangling[:8])}"
                         f"{', ...' if len(dangling) > 8 else ''}")
    deps = [sorted({producer[x] for x in ins if x and x in producer}) for _, ins, _ in nodes]
    if all(d < i for i, ds in enumerate(deps) for d in ds):
        return list(range(len(nodes)))
    # Kahn's algorithm, smallest index first, so the result is deterministic and stays close
    # to the file's order
    import heapq
    users: dict[int, list[int]] = {}
    indeg = [len(ds) for ds in deps]
    for i, ds in enumerate(deps):
        for d in ds:
            users.setdefault(d, []).append(i)
    ready = [i for i, n in enumerate(indeg) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, ()):
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(nodes):
        raise ModelError(f"{what}: the nodes form a cycle: "
                         + " -> ".join(f"'{show(nodes[i][0])}'" for i in _a_cycle(deps, set(order)))
                         + "; a model must be a directed acyclic graph")
    return order


def _a_cycle(deps, done) -> list[int]:
    """One cycle among the nodes not in `done` (each of which has a dependency on the cycle)."""
    start = min(i for i in range(len(deps)) if i not in done)
    seen: dict[int, int] = {}
    path = []
    i = start
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = next(d for d in deps[i] if d not in done)
    cyc = path[seen[i]:][::-1]  # producer -> consumer order
    k = cyc.index(min(cyc))
    cyc = cyc[k:] + cyc[:k]  # from the node first in the file
    return cyc + [cyc[0]]
