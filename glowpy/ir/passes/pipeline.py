"""The graph pass pipeline: one ordered list. Each pass takes a graph and returns a graph."""
from glowpy.ir.passes.batchnorm import lower_batchnorm
from glowpy.ir.passes.dce import eliminate_dead_code
from glowpy.ir.passes.fold import fold_constants

PIPELINE = [
    # values that became computable at compile time (the importer already folds as it goes)
    fold_constants,
    # BatchNormalization -> per-channel Mul + Add with folded constants
    lower_batchnorm,
    # drop whatever no output needs (shape-computing chains, unused branches)
    eliminate_dead_code,
]

# passes needed for correctness even at -O0 (lowering has no BatchNormalization kernel)
REQUIRED = {lower_batchnorm, eliminate_dead_code}


def optimize(graph, level: int = 1):
    for p in PIPELINE:
        if level > 0 or p in REQUIRED:
            graph = p(graph)
    return graph
