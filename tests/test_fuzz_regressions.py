"""Each crash or hang tools/fuzz.py found (docs/robustness.md), reduced to a minimal model:
now a one-line error naming the node and the problem (exit 1), or a bundle."""
import numpy as np
import pytest
from onnx import AttributeProto, TensorProto, helper

from hostile import cli, cli_limited, const, model, one_error, save, vi

n = helper.make_node
F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64


def attr(name, value, type_):
    a = helper.make_attribute(name, value)
    a.type = type_
    return a


def case_reshape_without_shape():
    return model([n("Reshape", ["x"], ["y"], name="r")], [vi("x", [2, 3])], [vi("y", None)], opset=4)


def case_slice_without_starts():
    return model([n("Slice", ["x"], ["y"], name="s", ends=[1])], [vi("x", [2, 3])], [vi("y", None)],
                 opset=9)


def case_conv_mixed_types():
    return model([n("Conv", ["x", "w"], ["y"], name="c")], [vi("x", [1, 1, 3, 3])], [vi("y", None)],
                 [const("w", np.ones((1, 1, 1, 1), np.int32))])


def case_shape_float_start():
    m = model([n("Shape", ["x"], ["y"], name="sh")], [vi("x", [2, 3])], [vi("y", None)], opset=15)
    m.graph.node[0].attribute.append(attr("start", 1.0, AttributeProto.FLOAT))
    return m


def case_reduce_int_axes():
    m = model([n("ReduceSum", ["x"], ["y"], name="rs")], [vi("x", [2, 3])], [vi("y", None)], opset=11)
    m.graph.node[0].attribute.append(attr("axes", 1, AttributeProto.INT))
    return m


def case_clip_vector_bounds():
    return model([n("Clip", ["x", "lo", "hi"], ["y"], name="clip")], [vi("x", [2, 3])],
                 [vi("y", None)], [const("lo", np.zeros(2, np.float32)),
                                   const("hi", np.ones(2, np.float32))])


def case_unsqueeze_repeated_axes():
    return model([n("Unsqueeze", ["x", "ax"], ["y"], name="u")], [vi("x", [2, 3])], [vi("y", None)],
                 [const("ax", np.array([1, 1], np.int64))])


def case_max_empty_input():
    return model([n("Max", ["x", ""], ["y"], name="max")], [vi("x", [2])], [vi("y", None)])


def case_op_before_its_opset():
    return model([n("HardSwish", ["x"], ["y"], name="hs")], [vi("x", [2])], [vi("y", None)], opset=13)


def case_matmul_int32():
    return model([n("MatMul", ["a", "b"], ["y"], name="mm")], [vi("a", [2, 2], I32), vi("b", [2, 2], I32)],
                 [vi("y", None, I32)])


def case_split_scalar():
    return model([n("Split", ["x"], ["a", "b"], name="sp", axis=0)], [vi("x", [])],
                 [vi("a", None), vi("b", None)], opset=13)


def case_conv_kernel_shape_disagrees():
    return model([n("Conv", ["x", "w"], ["y"], name="c", kernel_shape=[5, 65536], auto_pad="SAME_UPPER")],
                 [vi("x", [1, 1, 28, 28])], [vi("y", None)],
                 [const("w", np.ones((8, 1, 5, 5), np.float32))])


def case_upsample_antialias():
    m = model([n("Upsample", ["x", "sc"], ["y"], name="up")], [vi("x", [1, 1, 2, 2])], [vi("y", None)],
              [const("sc", np.array([1, 1, 2, 2], np.float32))], opset=9)
    m.graph.node[0].attribute.append(helper.make_attribute("antialias", 1))
    return m


def case_gemm_c_of_rank_3():
    # np.broadcast_shapes([4, 4, 1], (1, 10)) is (4, 4, 10): C broadcast both ways reached the
    # kernel (IndexError in gemm/vector.py)
    return model([n("Gemm", ["a", "b", "c"], ["y"], name="g", transB=1)], [vi("a", [1, 108])],
                 [vi("y", None)], [const("b", np.ones((10, 108), np.float32)),
                                   const("c", np.ones((4, 4, 1), np.float32))])


def case_logsoftmax_scalar():
    return model([n("LogSoftmax", ["x"], ["y"], name="ls", axis=0)], [vi("x", [])], [vi("y", None)])


def case_constant_of_shape_zero_and_huge_dim():
    return model([n("ConstantOfShape", ["s"], ["y"], name="cs")], [], [vi("y", None)],
                 [const("s", np.array([4, 0, 2**63 - 1], np.int64))])


@pytest.mark.parametrize("build, expect", [
    (case_constant_of_shape_zero_and_huge_dim, "node 'cs' (ConstantOfShape): output 0 float32[4, "
                                               "0, 9223372036854775807]: dimension "
                                               "9223372036854775807 alone needs more than the "
                                               "limit of"),
    (case_reshape_without_shape, "Reshape (opset 4): missing attribute 'shape' (the target shape; "
                                 "it became an input in opset 5)"),
    (case_slice_without_starts, "node 's' (Slice): missing required attribute 'starts' (ONNX opset 9)"),
    (case_conv_mixed_types, "node 'c' (Conv): input 1 ('w', W) has type int32"),
    (case_shape_float_start, "node 'sh' (Shape): attribute 'start' has type FLOAT; ONNX defines it "
                             "as INT"),
    (case_reduce_int_axes, "node 'rs' (ReduceSum): attribute 'axes' has type INT; ONNX defines it "
                           "as INTS"),
    (case_clip_vector_bounds, "node 'clip' (Clip): min must be a scalar, got shape [2]"),
    (case_unsqueeze_repeated_axes, "node 'u' (Unsqueeze): axes [1, 1] repeat an axis"),
    (case_max_empty_input, "node 'max' (Max): input 1 (data_0) is required, but its name is empty"),
    (case_op_before_its_opset, "node 'hs' (HardSwish): HardSwish does not exist in ai.onnx opset 13; "
                               "it was added in opset 14"),
    (case_matmul_int32, "node 'mm' (MatMul): int32 inputs are not supported (only floating point)"),
    (case_split_scalar, "node 'sp' (Split): input 'x' is a scalar; Split needs rank >= 1"),
    (case_conv_kernel_shape_disagrees, "node 'c' (Conv): kernel_shape [5, 65536] disagrees with "
                                       "the weights' shape [8, 1, 5, 5]"),
    (case_gemm_c_of_rank_3, "node 'g' (Gemm): C shape [4, 4, 1] does not broadcast to [1, 10]"),
    (case_logsoftmax_scalar, "node 'ls' (LogSoftmax): input 'x' is a scalar; LogSoftmax needs "
                             "rank >= 1"),
    (case_upsample_antialias, "node 'up' (Upsample): attribute 'antialias' is not an attribute of "
                              "Upsample in any ONNX opset"),
])
def test_fuzz_finding_is_a_model_error(capsys, tmp_path, build, expect):
    path = save(build(), tmp_path / "m.onnx")
    msg = one_error(capsys, f"-model={path}", f"-emit-bundle={tmp_path}/out", status=1)
    assert msg.startswith(expect), msg
    assert not (tmp_path / "out").exists()


def test_invalid_utf8_op_type(capsys, tmp_path):
    data = model([n("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", None)]).SerializeToString()
    (tmp_path / "m.onnx").write_bytes(data.replace(b"Relu", b"R\xffl\xfe"))
    msg = one_error(capsys, f"-model={tmp_path}/m.onnx", f"-emit-bundle={tmp_path}/out", status=1)
    assert msg.endswith("is not a valid ONNX model: the node 0 op_type is not valid UTF-8 text")


def test_int8_maxpool_compiles(capsys, tmp_path):
    m = model([n("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])], [vi("x", [1, 1, 4, 4], TensorProto.INT8)],
              [vi("y", None, TensorProto.INT8)], opset=12)
    rc, lines, _ = cli(capsys, f"-model={save(m, tmp_path / 'm.onnx')}", f"-emit-bundle={tmp_path}/o")
    assert rc == 0 and lines == []


def test_huge_pool_kernel_is_refused_quickly(tmp_path):
    """AveragePool, kernel 2 x (2^63-1), SAME_LOWER: counting taps per output was O(kernel),
    and a later kernel emitter built per-tap masks (12 GB before it was stopped). Run with 2 GiB
    of address space and a time limit, so a regression fails instead of taking the machine."""
    m = model([n("AveragePool", ["x"], ["y"], name="pool", auto_pad="SAME_LOWER",
                 kernel_shape=[2, (1 << 63) - 1])], [vi("x", [1, 3, 8, 8])], [vi("y", None)])
    rc, lines = cli_limited(f"-model={save(m, tmp_path / 'm.onnx')}", f"-emit-bundle={tmp_path}/o",
                            seconds=60)
    assert rc == 1 and lines == [
        "model-compiler: error: node 'pool' (AveragePool): kernel_shape [2, 9223372036854775807] "
        "(dilations [1, 1]) spans more than twice the input [8, 8] along spatial dim 1"]
    assert not (tmp_path / "o").exists()
