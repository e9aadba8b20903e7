"""Caffe2 nets built in Python through glowpy's own Caffe2 schema (glowpy.frontend.caffe2_proto):
small helpers to write operators and fills, and whole models converted from ONNX originals:
a LeNet from mnist8's weights and ResNet-8 from mlperf_tiny_resnet8.

    python tests/caffe2_models.py lenet OUT_DIR     writes OUT_DIR/predict_net.pb and init_net.pb
    python tests/caffe2_models.py resnet8 OUT_DIR
"""
from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from glowpy.frontend import caffe2_proto as c2  # noqa: E402

MODELS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "models")


def arg(name, v):
    a = c2.Argument(name=name)
    if isinstance(v, str):
        a.s = v.encode()
    elif isinstance(v, bytes):
        a.strings.append(v)
    elif isinstance(v, (bool, int, np.integer)):
        a.i = int(v)
    elif isinstance(v, (float, np.floating)):
        a.f = float(v)
    elif all(isinstance(x, (int, np.integer)) for x in v):
        a.ints.extend(int(x) for x in v)
    else:
        a.floats.extend(float(x) for x in v)
    return a


def op(type_, inputs, outputs, name="", **args):
    o = c2.OperatorDef(type=type_, name=name)
    o.input.extend([inputs] if isinstance(inputs, str) else inputs)
    o.output.extend([outputs] if isinstance(outputs, str) else outputs)
    o.arg.extend(arg(k, v) for k, v in args.items())
    return o


def fill(name, array):
    """The GivenTensor*Fill op that creates `array` (float32, int32, int64 or uint8)."""
    a = np.asarray(array)
    kinds = {np.dtype(np.float32): ("GivenTensorFill", a.reshape(-1).astype(np.float64).tolist()),
             np.dtype(np.int32): ("GivenTensorIntFill", a.reshape(-1).tolist()),
             np.dtype(np.int64): ("GivenTensorInt64Fill", a.reshape(-1).tolist()),
             np.dtype(np.uint8): ("GivenTensorByteStringToUInt8Fill", a.tobytes())}
    ty, values = kinds[a.dtype]
    o = op(ty, [], name, shape=list(a.shape))
    v = c2.Argument(name="values")
    if isinstance(values, bytes):
        v.strings.append(values)
    elif a.dtype.kind == "f":
        v.floats.extend(values)
    else:
        v.ints.extend(values)
    o.arg.append(v)
    return o


def net(name, ops, external_input=(), external_output=()):
    n = c2.NetDef(name=name)
    n.op.extend(ops)
    n.external_input.extend(external_input)
    n.external_output.extend(external_output)
    return n


def save(netdef, path):
    from google.protobuf import text_format
    if path.endswith(".pbtxt"):
        with open(path, "w") as f:
            f.write(text_format.MessageToString(netdef))
    else:
        with open(path, "wb") as f:
            f.write(netdef.SerializeToString())
    return path


def write_model(predict, init, form: str, directory: str) -> list[str]:
    """Writes the pair in one of the three forms; returns the -model paths.
    form: "dir" (DIR/predict_net.pb + DIR/init_net.pb), "pb" or "pbtxt" (two files)."""
    os.makedirs(directory, exist_ok=True)
    if form == "dir":
        save(predict, os.path.join(directory, "predict_net.pb"))
        save(init, os.path.join(directory, "init_net.pb"))
        return [directory]
    ext = "." + form
    return [save(predict, os.path.join(directory, "predict_net" + ext)),
            save(init, os.path.join(directory, "init_net" + ext))]


def _onnx_weights(name):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(os.path.join(MODELS, name + ".onnx"))
    return m, {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


def lenet_mnist():
    """Glow's LeNet-MNIST shape on mnist8's weights: input `data` [1,1,28,28], outputs `fc3`
    (the logits, = mnist8's output) and `softmax`. ReLUs run in place, as in Caffe2's nets."""
    _, w = _onnx_weights("mnist8")
    weights = {
        "conv1_w": w["Parameter5"], "conv1_b": w["Parameter6"].reshape(-1),
        "conv2_w": w["Parameter87"], "conv2_b": w["Parameter88"].reshape(-1),
        # mnist8 multiplies the flattened [1,256] by a [256,10] matrix; Caffe2's FC stores W as
        # [outputs, inputs]
        "fc3_w": np.ascontiguousarray(w["Parameter193"].reshape(256, 10).T),
        "fc3_b": w["Parameter194"].reshape(-1),
    }
    init = net("lenet_mnist_init", [fill(k, v.astype(np.float32)) for k, v in weights.items()],
               external_output=list(weights))
    ops = [
        op("Conv", ["data", "conv1_w", "conv1_b"], "conv1", kernel=5, pad=2, stride=1, order="NCHW"),
        op("Relu", "conv1", "conv1"),
        op("MaxPool", "conv1", "pool1", kernel=2, stride=2),
        op("Conv", ["pool1", "conv2_w", "conv2_b"], "conv2", kernel=5, pad=2, stride=1),
        op("Relu", "conv2", "conv2"),
        op("MaxPool", "conv2", "pool2", kernel=3, stride=3),
        op("FC", ["pool2", "fc3_w", "fc3_b"], "fc3"),
        op("Softmax", "fc3", "softmax"),
    ]
    predict = net("lenet_mnist", ops, ["data"] + list(weights), ["fc3", "softmax"])
    return predict, init


def resnet8():
    """mlperf_tiny_resnet8 as a Caffe2 net (input `input_1` [1,3,32,32], output `Identity`):
    Conv with asymmetric pads (pad_t/pad_l/pad_b/pad_r), Conv+Relu as ConvRelu, Add of two
    tensors, AveragePool, Transpose, Reshape (with its old-shape output), FC and Softmax."""
    from onnx import helper
    m, w = _onnx_weights("mlperf_tiny_resnet8")
    g = m.graph
    names = {g.input[0].name: "input_1", g.output[0].name: "Identity"}
    consumers = {}
    for n in g.node:
        for x in n.input:
            consumers.setdefault(x, []).append(n)

    def blob(x):
        return names.setdefault(x, f"b{len(names)}")

    init_ops, ops, fused = [], [], set()
    for n in g.node:
        if id(n) in fused:
            continue
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        if n.op_type == "Conv":
            wn, bn = blob(n.input[1]), blob(n.input[2])
            init_ops += [fill(wn, w[n.input[1]]), fill(bn, w[n.input[2]])]
            t, l, b_, r = a["pads"][0], a["pads"][1], a["pads"][2], a["pads"][3]
            out = n.output[0]
            users = consumers.get(out, [])
            kind = "Conv"
            if len(users) == 1 and users[0].op_type == "Relu":
                kind, out = "ConvRelu", users[0].output[0]
                fused.add(id(users[0]))
            ops.append(op(kind, [blob(n.input[0]), wn, bn], blob(out), kernel=a["kernel_shape"][0],
                          stride=a["strides"][0], pad_t=t, pad_l=l, pad_b=b_, pad_r=r))
        elif n.op_type in ("Relu", "Softmax"):
            ops.append(op(n.op_type, blob(n.input[0]), blob(n.output[0])))
        elif n.op_type == "Add":
            ops.append(op("Add", [blob(x) for x in n.input], blob(n.output[0])))
        elif n.op_type == "AveragePool":
            ops.append(op("AveragePool", blob(n.input[0]), blob(n.output[0]),
                          kernel=a["kernel_shape"][0], stride=a["strides"][0]))
        elif n.op_type == "Transpose":
            ops.append(op("Transpose", blob(n.input[0]), blob(n.output[0]), axes=a["perm"]))
        elif n.op_type == "Reshape":
            ops.append(op("Reshape", blob(n.input[0]), [blob(n.output[0]), blob(n.output[0]) + "_old"],
                          shape=[int(v) for v in w[n.input[1]]]))
        elif n.op_type == "Gemm":
            assert a.get("transB") == 1 and a.get("transA", 0) == 0
            wn, bn = blob(n.input[1]), blob(n.input[2])
            init_ops += [fill(wn, w[n.input[1]]), fill(bn, w[n.input[2]])]
            ops.append(op("FC", [blob(n.input[0]), wn, bn], blob(n.output[0])))
        else:
            raise NotImplementedError(n.op_type)
    init = net("resnet8_init", init_ops, external_output=[o.output[0] for o in init_ops])
    predict = net("resnet8", ops, ["input_1"] + [o.output[0] for o in init_ops], ["Identity"])
    return predict, init


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("lenet", "resnet8"):
        sys.exit("usage: python tests/caffe2_models.py lenet|resnet8 OUT_DIR")
    p, i = lenet_mnist() if sys.argv[1] == "lenet" else resnet8()
    print("\n".join(write_model(p, i, "dir", sys.argv[2])))
