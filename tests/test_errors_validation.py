"""Model validation before any code is generated: each hostile model is refused with exit
status 1 and one line naming the file, node, op, tensor, dimension or option involved (and the
fix where there is one), and the output directory is not created."""
import os
import re
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from hostile import MNIST, cli_limited, const, model, one_error, relu_model, save, vi

n = helper.make_node


def refused(capsys, tmp_path, m, *args, status=1):
    """Compiles model `m` (a ModelProto or bytes) and returns the one error line; asserts that
    no output directory appeared."""
    path = tmp_path / "m.onnx"
    if isinstance(m, bytes):
        path.write_bytes(m)
    else:
        save(m, path)
    out = tmp_path / "out"
    msg = one_error(capsys, f"-model={path}", f"-emit-bundle={out}", *args, status=status)
    assert not out.exists(), os.listdir(out)
    return msg


# -- files that are not (valid) models ----------------------------------------------------------

def test_protobuf_parse_error(capsys, tmp_path):
    msg = refused(capsys, tmp_path, b"\x0a\xff\xff\xff\xff\x0f garbage")
    assert re.fullmatch(r"'.*m\.onnx' is not a valid ONNX model \(protobuf parse error: .*\)", msg)


def test_truncated_model(capsys, tmp_path):
    data = open(MNIST, "rb").read()
    msg = refused(capsys, tmp_path, data[: len(data) // 2])
    assert "is not a valid ONNX model (protobuf parse error" in msg


def test_tensor_file_is_not_a_model(capsys, tmp_path):
    """The reference input of a model given in its place: it parses, but holds no graph."""
    tensor = open(MNIST.replace(".onnx", "_data/test_data_set_0/input_0.pb"), "rb").read()
    msg = refused(capsys, tmp_path, tensor)
    assert msg.endswith("is not an ONNX model: it has no graph (is it a tensor, a Caffe2 net or "
                        "another protobuf?)")


def test_empty_file(capsys, tmp_path):
    assert "it has no graph" in refused(capsys, tmp_path, b"")


def test_graph_without_nodes(capsys, tmp_path):
    m = model([], [vi("x", [1])], [vi("x", [1])])
    assert refused(capsys, tmp_path, m).endswith("is not a usable ONNX model: its graph has no nodes")


def test_directory_and_missing_file(capsys, tmp_path):
    msg = one_error(capsys, f"-model={tmp_path}/nothing.onnx", f"-emit-bundle={tmp_path}/o",
                    status=1)
    assert msg == f"cannot read model file '{tmp_path}/nothing.onnx': no such file"
    d = tmp_path / "adir.onnx"
    d.mkdir()
    msg = one_error(capsys, f"-model={d}", f"-emit-bundle={tmp_path}/o", status=1)
    assert msg.startswith(f"cannot read model file '{d}': it is a directory")


def test_invalid_utf8_name(capsys, tmp_path):
    data = relu_model(name="xx").SerializeToString().replace(b"xx", b"\xff\xfe")
    assert refused(capsys, tmp_path, data).endswith("is not valid UTF-8 text")


def test_caffe2_directory_without_nets(capsys, tmp_path):
    d = tmp_path / "c2"
    d.mkdir()
    (d / "README.txt").write_text("no nets here\n")
    msg = one_error(capsys, f"-model={d}", f"-emit-bundle={tmp_path}/o", status=1)
    assert msg == f"directory '{d}' holds no predict_net.pb or predict_net.pbtxt"
    assert not (tmp_path / "o").exists()


# -- opsets, domains, ops -----------------------------------------------------------------------

def test_unsupported_opset(capsys, tmp_path):
    m = relu_model()
    m.opset_import[0].version = 99
    assert refused(capsys, tmp_path, m) == ("model uses ai.onnx opset 99; supported opsets are 1 "
                                            "to 28 (convert it with onnx.version_converter)")


def test_no_default_opset(capsys, tmp_path):
    m = relu_model()
    m.opset_import[0].domain = "com.example"
    assert refused(capsys, tmp_path, m).startswith("model imports no default-domain (ai.onnx) opset")


def test_unsupported_domains_all_listed(capsys, tmp_path):
    m = model([n("Relu", ["x"], ["a"]), n("FusedGemm", ["a"], ["b"], domain="com.microsoft"),
               n("GroupQueryAttention", ["b"], ["c"], domain="com.microsoft"),
               n("LabelEncoder", ["c"], ["y"], domain="ai.onnx.ml")],
              [vi("x", [2])], [vi("y", [2])])
    m.opset_import.extend([helper.make_opsetid("com.microsoft", 1)])
    assert refused(capsys, tmp_path, m) == (
        "unsupported ops (2 nodes): ai.onnx.ml.LabelEncoder x1 (y); "
        "com.microsoft.GroupQueryAttention x1 (c); of other domains only the com.microsoft ops "
        "-list-ops shows are supported")


def test_unknown_ops_all_listed_at_once(capsys, tmp_path):
    m = model([n("Relu", ["x"], ["a"]), n("FooOp", ["a"], ["b"], name="f1"),
               n("BarOp", ["b"], ["c"], name="b1"), n("FooOp", ["c"], ["y"], name="f2")],
              [vi("x", [2])], [vi("y", [2])])
    assert refused(capsys, tmp_path, m) == "unsupported ops (3 nodes): BarOp x1 (b1); FooOp x2 (f1, f2)"


# -- wiring ---------------------------------------------------------------------------------------

def test_dangling_references_all_listed(capsys, tmp_path):
    m = model([n("Add", ["x", "ghost"], ["a"], name="add"), n("Relu", ["phantom"], ["y"], name="r")],
              [vi("x", [2])], [vi("y", [2]), vi("nowhere", [2])])
    assert refused(capsys, tmp_path, m) == (
        "model: 3 reference(s) to tensors that no node, initializer or graph input defines: "
        "'ghost' (input of node 'add'), 'phantom' (input of node 'r'), 'nowhere' (graph output)")


def test_cycle(capsys, tmp_path):
    m = model([n("Add", ["x", "c"], ["a"], name="A"), n("Relu", ["a"], ["b"], name="B"),
               n("Neg", ["b"], ["c"], name="C"), n("Relu", ["a"], ["y"], name="out")],
              [vi("x", [2])], [vi("y", [2])])
    assert refused(capsys, tmp_path, m) == ("model: the nodes form a cycle: 'A' -> 'B' -> 'C' -> "
                                            "'A'; a model must be a directed acyclic graph")


def test_unsorted_acyclic_graph_is_accepted(capsys, tmp_path):
    from hostile import cli
    m = model([n("Neg", ["a"], ["y"], name="second"), n("Relu", ["x"], ["a"], name="first")],
              [vi("x", [2])], [vi("y", [2])])
    rc, lines, _ = cli(capsys, f"-model={save(m, tmp_path / 'm.onnx')}", f"-emit-bundle={tmp_path}/o")
    assert rc == 0 and lines == []


def test_tensor_produced_twice(capsys, tmp_path):
    m = model([n("Relu", ["x"], ["a"], name="r1"), n("Neg", ["x"], ["a"], name="r2"),
               n("Abs", ["a"], ["y"])], [vi("x", [2])], [vi("y", [2])])
    assert refused(capsys, tmp_path, m) == ("model: 1 tensor(s) defined more than once: 'a' "
                                            "(node 'r2'); every tensor must have exactly one producer")


def test_duplicate_initializer(capsys, tmp_path):
    m = model([n("Add", ["x", "w"], ["y"])], [vi("x", [2])], [vi("y", [2])],
              [const("w", np.ones(2, np.float32)), const("w", np.zeros(2, np.float32))])
    assert refused(capsys, tmp_path, m) == "initializer 'w' is declared more than once"


# -- types and shapes ---------------------------------------------------------------------------

def test_type_mismatch_between_inputs(capsys, tmp_path):
    m = model([n("Add", ["x", "k"], ["y"], name="add")], [vi("x", [2, 3])], [vi("y", [2, 3])],
              [const("k", np.ones(3, np.int64))])
    assert refused(capsys, tmp_path, m) == (
        "node 'add' (Add): input 1 ('k', B) has type int64 but input 0 ('x', A) has type float; "
        "both are T and must match")


def test_type_not_accepted_by_op(capsys, tmp_path):
    m = model([n("Conv", ["x", "w"], ["y"], name="conv")], [vi("x", [1, 1, 4, 4], TensorProto.INT32)],
              [vi("y", [1, 1, 4, 4], TensorProto.INT32)], [const("w", np.ones((1, 1, 1, 1), np.int32))])
    msg = refused(capsys, tmp_path, m)
    assert msg.startswith("node 'conv' (Conv): input 0 ('x', X) has type int32, which Conv does not "
                          "accept (T: ")


def test_attribute_of_wrong_type(capsys, tmp_path):
    m = model([n("Transpose", ["x"], ["y"], name="t")], [vi("x", [2, 3])], [vi("y", [3, 2])])
    m.graph.node[0].attribute.append(helper.make_attribute("perm", 1.5))
    assert refused(capsys, tmp_path, m) == ("node 't' (Transpose): attribute 'perm' has type FLOAT; "
                                            "ONNX defines it as INTS")


def test_missing_required_attribute(capsys, tmp_path):
    m = model([n("Cast", ["x"], ["y"], name="cast")], [vi("x", [2])], [vi("y", [2])])
    assert refused(capsys, tmp_path, m) == ("node 'cast' (Cast): missing required attribute 'to' "
                                            "(ONNX opset 17)")


def test_shapes_that_do_not_broadcast(capsys, tmp_path):
    m = model([n("Add", ["x", "z"], ["y"], name="add")], [vi("x", [2, 3]), vi("z", [4])],
              [vi("y", [2, 3])])
    assert refused(capsys, tmp_path, m) == ("node 'add' (Add): input shapes [2, 3] and [4] do not "
                                            "broadcast")


def test_declared_output_type_mismatch(capsys, tmp_path):
    m = relu_model()
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    assert refused(capsys, tmp_path, m) == ("graph output 'y' is declared int64 but the graph "
                                            "computes float32[2, 3]")


def test_declared_output_shape_mismatch(capsys, tmp_path):
    m = relu_model()
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 4
    assert refused(capsys, tmp_path, m) == ("graph output 'y' is declared with shape [2, 4] but "
                                            "the graph computes [2, 3]")


@pytest.mark.parametrize("dim, what", [(0, "0; tensors with zero or negative"),
                                       (-3, "-3; tensors with zero or negative")])
def test_zero_or_negative_input_dimension(capsys, tmp_path, dim, what):
    m = relu_model()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = dim
    msg = refused(capsys, tmp_path, m)
    assert msg.startswith(f"input 'x': dimension 1 is {what} dimensions are not supported")
    assert msg.endswith("(give a shape with -model-input=x,float,[...])")


def test_negative_initializer_dimension(capsys, tmp_path):
    m = model([n("Add", ["x", "w"], ["y"])], [vi("x", [2])], [vi("y", [2])],
              [const("w", np.ones(2, np.float32))])
    m.graph.initializer[0].dims[0] = -2
    assert refused(capsys, tmp_path, m) == ("initializer 'w': dimension 0 is -2 in [-2]; tensors "
                                            "with negative dimensions are not supported")


def test_unknown_inner_dimension_names_the_fix(capsys, tmp_path):
    m = relu_model()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "width"
    assert refused(capsys, tmp_path, m) == (
        "input 'x': dimension 1 ('width') is not known; fix it with -onnx-define-symbol=width,N "
        "or -model-input=x,float,[...]")


@pytest.mark.parametrize("target, expect", [
    ([2, -1, -1], r"node 'reshape' \(Reshape\): invalid target shape \[2, -1, -1\]"),
    ([4, 4], r"node 'reshape' \(Reshape\): cannot reshape \[2, 3, 4\] \(24 elements\) to \[4, 4\]"),
    ([5, -1], r"node 'reshape' \(Reshape\): cannot reshape \[2, 3, 4\] \(24 elements\) to \[5, -1\]"),
    ([0, 0, 0, 0], r"node 'reshape' \(Reshape\): shape \[0, 0, 0, 0\] copies dim 3 that input "
                   r"\[2, 3, 4\] does not have"),
])
def test_contradictory_reshape_target(capsys, tmp_path, target, expect):
    m = model([n("Reshape", ["x", "s"], ["y"], name="reshape")], [vi("x", [2, 3, 4])],
              [vi("y", None)], [const("s", np.array(target, np.int64))])
    assert re.fullmatch(expect, refused(capsys, tmp_path, m))


# -- sizes ----------------------------------------------------------------------------------------

def test_input_too_large_for_the_address_space(capsys, tmp_path):
    m = relu_model(shape=(1 << 20, 1 << 20, 1 << 20))
    t0 = time.monotonic()
    msg = refused(capsys, tmp_path, m)
    assert msg == ("input 'x' float32[1048576, 1048576, 1048576] needs 4611686018427387904 bytes, "
                   "more than the limit of 4294967296 bytes (the target's address space, or "
                   "-max-region-size)")
    assert time.monotonic() - t0 < 30


def test_folding_bomb_is_refused_before_allocation(tmp_path):
    """A 100-byte model whose constant folding would produce a 64 GiB tensor: refused with
    2 GiB of address space (so nothing that size was allocated), in seconds."""
    m = model([n("Expand", ["one", "shape"], ["big"], name="bomb"), n("Add", ["x", "big"], ["y"])],
              [vi("x", [1])], [vi("y", None)],
              [const("one", np.ones(1, np.float32)),
               const("shape", np.array([1 << 17, 1 << 17], np.int64))])
    rc, lines = cli_limited(f"-model={save(m, tmp_path / 'm.onnx')}", f"-emit-bundle={tmp_path}/o",
                            seconds=60)
    assert rc == 1 and lines == [
        "model-compiler: error: node 'bomb' (Expand): output 0 float32[131072, 131072] needs "
        "68719476736 bytes, more than the limit of 4294967296 bytes (the target's address "
        "space, or -max-region-size)"]
    assert not (tmp_path / "o").exists()


def test_tensor_too_large_for_a_32_bit_target(capsys, tmp_path):
    m = relu_model(shape=(1 << 15, 1 << 15))  # 4 GiB of float: fits 64-bit, not 32-bit
    msg = refused(capsys, tmp_path, m, "-target=arm", "-mcpu=cortex-m7")
    assert msg == ("input 'x' float32[32768, 32768] needs 4294967296 bytes, more than the limit "
                   "of 2147483647 bytes (the target's address space, or -max-region-size)")


def test_region_larger_than_the_configured_limit(capsys, tmp_path):
    """Every tensor fits the limit (160 floats, 640 bytes), the constant region (two of them,
    each 64-byte aligned: 1280 bytes) does not."""
    m = model([n("Add", ["x", "c1"], ["y1"]), n("Mul", ["x", "c2"], ["y2"])],
              [vi("x", [160])], [vi("y1", [160]), vi("y2", [160])],
              [const("c1", np.arange(160, dtype=np.float32)),
               const("c2", np.arange(160, dtype=np.float32) + 1)])
    assert refused(capsys, tmp_path, m, "-max-region-size=1000") == (
        "the constant region needs 1280 bytes, more than the limit of 1000 bytes (the target's "
        "address space, or -max-region-size)")


def test_limit_above_the_target_address_space_is_a_usage_error(capsys, tmp_path):
    msg = one_error(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/o", "-target=avr",
                    "-max-region-size=1M", status=2)
    assert msg == "-max-region-size=1048576: larger than the 16-bit target can address (32767 bytes)"


def test_error_line_escapes_hostile_names(capsys, tmp_path):
    """A node name with a newline, an ANSI escape and a bidi override cannot forge lines."""
    m = model([n("NoSuchOp", ["x"], ["y"], name="evil\nmodel-compiler: ok\x1b[2J\u202e")],
              [vi("x", [2])], [vi("y", [2])])
    assert refused(capsys, tmp_path, m) == ("unsupported ops (1 nodes): NoSuchOp x1 (evil\\nmodel-"
                                            "compiler: ok\\x1b[2J\\u202e)")


def test_requantization_scale_out_of_range(capsys, tmp_path):
    """A QDQ Relu whose output scale is 1e-30 of its input's: no int32 multiplier expresses
    the ratio, so the int8 fold refuses it by name instead of raising inside qmath."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "s1", "z"], ["xf"], name="dq_in"),
             helper.make_node("Relu", ["xf"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "tiny", "z"], ["rq"], name="q_out"),
             helper.make_node("DequantizeLinear", ["rq", "tiny", "z"], ["y"], name="dq_out")]
    inits = [const("s1", np.float32(1.0)), const("tiny", np.float32(1e-30)), const("z", np.int8(0))]
    msg = refused(capsys, tmp_path, model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], inits))
    assert "node 'relu' (Relu) quantized by 'q_out'" in msg and "2**30" in msg
