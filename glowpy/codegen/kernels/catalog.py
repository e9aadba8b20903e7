"""Every kernel family, imported so that its variants are registered (glowpy.codegen.registry);
the driver (codegen/module.py) and the tools that list what has a kernel import this module.
Order does not matter: variants of one op are ranked, not ordered by import."""
from glowpy.codegen.kernels.conv import channel, channel_last, col2im, depthwise, depthwise_phase, direct  # noqa: F401,E501
from glowpy.codegen.kernels.conv import im2col, pixel  # noqa: F401
from glowpy.codegen.kernels.conv import pointwise_inplace, pointwise_packed, pointwise_strided, transpose, winograd, winograd_select  # noqa: F401,E501
from glowpy.codegen.kernels.elementwise import arith, fused, integer, logical, runs, softplus  # noqa: F401,E501
from glowpy.codegen.kernels.gemm import direct as gemm_direct, dot as gemm_dot, einsum  # noqa: F401
from glowpy.codegen.kernels.gemm import vector as gemm_vector  # noqa: F401
from glowpy.codegen.kernels.gemm import blocking as gemm_blocking
from glowpy.codegen.kernels.int8 import column_scratch, conv as int8_conv  # noqa: F401
from glowpy.codegen.kernels.int8 import depthwise as int8_depthwise, depthwise_float  # noqa: F401
from glowpy.codegen.kernels.int8 import matmul, matmul_dsp, pairs  # noqa: F401
from glowpy.codegen.kernels.int8 import pairs_matmul, pairs_window, pool as int8_pool  # noqa: F401
from glowpy.codegen.kernels.int8 import winograd as int8_winograd
from glowpy.codegen.kernels.int8 import qadd_table, qbinary, qfinish, qtable, quant  # noqa: F401
from glowpy.codegen.kernels.pool import direct as pool_direct, vector as pool_vector  # noqa: F401
from glowpy.codegen.kernels.reduce import norm, reductions, softmax, vector  # noqa: F401
from glowpy.codegen.kernels.recurrent import cell  # noqa: F401
from glowpy.codegen.kernels.tensor import grid_sample, index, layout, movement, resize, scatter  # noqa: F401,E501


def graph_rewrites(memory_first: bool):
    """The backend's step before the graph pipeline: rewrites that trade memory for time, where
    time comes first (hosts, TargetCaps.memory_first False, unless -activation-memory says
    otherwise): a strided ConvTranspose as a 1x1 product and Col2Im
    (glowpy/ir/passes/convtranspose.py)."""
    from glowpy.ir.passes.convtranspose import as_product_col2im
    return (lambda graph: graph) if memory_first else as_product_col2im


def late_rewrites(caps, memory_first: bool, winograd: bool = True, qconv: str | None = None):
    """The backend's step after the graph pipeline. On every vector target a float product of a
    matrix by one column as that column, read as a row, by the matrix transposed, and where time
    comes first by a few columns too (glowpy/ir/passes/matvec.py). Where time comes first: a Gemm's
    transposed run-time B as a Transpose and a row-major B (glowpy/ir/passes/gemm_operands.py)
    unless its few rows of A take dot products over B as it lies (gemm/dot.py);
    on vector targets with cache figures, dilated convolutions by phases where the
    phase images are large enough (glowpy/ir/passes/dilated.py); convolutions whose block weights outgrow
    half of L2 split over chunks of input channels (glowpy/ir/passes/split_reduction.py) such
    that a chunk's input plus one block's weights take three quarters of L2 (blocks outermost
    then re-read the chunk's input from L2), and stride-1 1x1 convolutions too deep for one
    packed micro-panel split into chunks whose panel fits (pointwise_packed.channel_chunk). A
    block is taken as two vectors of output channels (the channel-vectorized tiles' 16 on
    AVX2). Measured on the FCN head (3x3 2048 -> 512 on
    28x28, Zen 3, 512 KiB of L2, machine under load; onnxruntime 157-194 ms in the same runs):
    unsplit 271-277 ms; chunks of 448 channels (block weights in half of L2) 185-187; 144
    (input + block weights 534 KiB, past L2) 188-201; 128 (475 KiB) 104; 112 (416 KiB)
    99-129; 56 141 (the output read and written once per chunk). With qconv, first the
    integer convolutions whose sums float32 holds exactly become float ones
    (glowpy/ir/passes/quant/float_exact.py; compiler._qconv_in_float decides), except, with
    "auto", those x86's int16 pair GEMM takes (kernels/int8/pairs.py; marked for it)."""
    import math

    from glowpy.ir.passes.dilated import space_to_batch
    from glowpy.ir.passes.gemm_operands import transpose_runtime_b
    from glowpy.ir.passes.matvec import swap_columns
    from glowpy.ir.passes.quant.float_exact import qconv_in_float
    from glowpy.ir.passes.split_reduction import split_reduction
    from glowpy.codegen.kernels.conv import pointwise_packed, winograd_select as wg
    from glowpy.codegen.kernels.vectors import Simd
    width = Simd.of(caps).width
    def first(graph):
        if width > 1:  # one column adds no activation bytes: memory-first targets too
            graph = swap_columns(graph, width, not memory_first)
        if qconv is None:
            return graph
        if qconv == "auto":
            return qconv_in_float(graph, lambda n: pairs.mark(caps, n, graph, winograd) or
                                  depthwise_float.mark(caps, n))
        return qconv_in_float(graph)
    if memory_first:  # all add activation bytes
        return first

    def transposed_b(graph):
        return transpose_runtime_b(first(graph), lambda node: gemm_dot.takes(caps, node))
    if width == 1 or not caps.l2_bytes:
        return transposed_b

    def chunk_of(node):
        packed = pointwise_packed.channel_chunk(caps, node)
        if packed is not None:
            return packed
        x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
        c, taps = w.shape[1], math.prod(w.shape[2:])
        win = node.opdef.window(node)
        r = wg.kernel_size(win)
        if winograd and r and wg.may_take(width, c, w.shape[0], math.prod(y.shape[2:]), r):
            return None  # Winograd's own blocks stream its transformed weights
        block = 2 * width * taps * 4  # one block's weight bytes per input channel
        if block * c <= caps.l2_bytes // 2 or math.prod(y.shape[2:]) < MIN_PLANE:
            return None
        per_channel = 4 * math.prod(x.shape[2:]) + block
        chunks = math.ceil(c / max(MIN_CHUNK, 3 * caps.l2_bytes // 4 // per_channel))
        return math.ceil(c / chunks / 8) * 8

    def phases_pay(node, d):
        """Phase images of MIN_PHASE_PLANE positions or more (Winograd's smallest, where the
        register tiles stay full), and weights that the d*d phase images do not re-read from
        past the caches too often (at most PHASE_WEIGHT_READS x L2 in all). Zen 3, 512 KiB L2,
        against onnxruntime: dilation 2, 256 channels (2.4 MB of weights) on 28x28 1.10 ->
        0.90-1.07 and on 65x65 1.54-1.58 -> 0.97-1.03; dilation 4 on 28x28 (7x7 phases)
        1.15-1.20 -> 1.50; dilation 4, 512 channels (9.4 MB, 16 phase images) on 65x65 1.07
        -> 1.35. Those two stay dilated."""
        h, w = node.inputs[0].shape[2:]
        return math.ceil(h / d) * math.ceil(w / d) >= MIN_PHASE_PLANE and \
            d * d * node.inputs[1].nbytes <= PHASE_WEIGHT_READS * caps.l2_bytes
    return lambda graph: split_reduction(space_to_batch(transposed_b(graph), phases_pay),
                                         chunk_of)


MIN_PLANE = 64  # output positions from which block weights are re-read often enough to split
# input channels a chunk has at least: on large planes (the FCN head on 65x65) the chunk's input
# cannot stay in L2 anyway, and every chunk reads and writes the whole output once more
MIN_CHUNK = 64
MIN_PHASE_PLANE = 144  # positions of a phase image from which a dilated Conv goes by phases
PHASE_WEIGHT_READS = 32  # weight bytes read over all phase images, in L2 sizes, at most


def post_planning(target, grow: bool = False):
    """The backend's step between planning and codegen: scratch in the activation region's
    gaps for the kernels that can use it (int8 convolution columns, x86's integer GEMM's packed
    tiles of several rows, quads16 products' rows in their pair order, int8 depthwise layers'
    float planes, the strided 1x1's gathered input, a first layer's gathered columns, the
    channel-vectorized rows' channels-last input). grow: time comes first and no activation
    budget was set, so the channels-last copy of a large input, a first layer's columns that
    the stack cannot hold and the reordered rows may grow the region where no gap has room
    (channel_last.place, im2col.place, pairs_matmul.place)."""
    def step(prog):
        column_scratch.place(prog, target.caps)
        pairs_window.place(prog, target.caps)
        pairs_matmul.place(prog, target.caps, grow)
        depthwise_float.place(prog, target.caps)
        pointwise_strided.place(prog, target.caps)
        im2col.place(prog, target.caps, grow)
        channel_last.place(prog, target.caps, channel.plan, channel.RANK, grow)
    return step


def post_lowering(target, winograd: bool = True, memory_first: bool = False):
    """The backend's step between lowering and planning (lower.lower's `transform`): the
    convolution algorithm the target runs best (-winograd), and where time comes first the
    packing scratch of Conv weights computed at run time (conv/runtime_weights.py) and of
    products' run-time B (gemm/vector.py, packed_floats)."""
    from glowpy.codegen.kernels.conv import runtime_weights

    def step(prog):
        if winograd:
            prog = winograd_select.select(prog, target.caps)
            prog = int8_winograd.select(prog, target.caps)
        if not memory_first:
            runtime_weights.add_scratch(prog)
            gemm_blocking.add_pack_scratch(prog, target.caps)
        return prog
    return step
