"""The Caffe2 protobuf schema (the messages of caffe2/proto/caffe2.proto that nets use), built
at import time from a FileDescriptorProto written here, so reading Caffe2 models needs neither
Caffe2 nor PyTorch. Field numbers and types are those of caffe2.proto (proto2); `required`
fields are declared optional so a sloppy file still parses and the loader reports what is
missing. The messages live in a private descriptor pool: they cannot clash with a real caffe2
install.

Exports the message classes NetDef, OperatorDef, Argument, TensorProto, QTensorProto,
DeviceOption, PartitionInfo, BackendOptions, MapFieldEntry, TensorProtos."""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_TYPES = {"string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "int64": _F.TYPE_INT64,
          "int32": _F.TYPE_INT32, "uint32": _F.TYPE_UINT32, "uint64": _F.TYPE_UINT64,
          "float": _F.TYPE_FLOAT, "double": _F.TYPE_DOUBLE, "bool": _F.TYPE_BOOL}

# TensorProto.DataType
DATA_TYPES = {"UNDEFINED": 0, "FLOAT": 1, "INT32": 2, "BYTE": 3, "STRING": 4, "BOOL": 5,
              "UINT8": 6, "INT8": 7, "UINT16": 8, "INT16": 9, "INT64": 10, "FLOAT16": 12,
              "DOUBLE": 13, "ZERO_COLLISION_HASH": 14, "REBATCHING_BUFFER": 15}

# message -> [(field name, number, label, type name, default)]; type names not in _TYPES are
# messages or enums of this package. Packed fields are marked by a trailing "!".
_MESSAGES = {
    "ExternalDataProto": [
        ("source_type", 1, _OPT, "int32", None), ("record_id", 2, _OPT, "string", None),
        ("record_size", 5, _OPT, "uint64", None), ("offset", 3, _OPT, "int64", None),
        ("strides", 4, _REP, "int64", None)],
    "TensorProto.Segment": [("begin", 1, _OPT, "int64", None), ("end", 2, _OPT, "int64", None)],
    "TensorProto": [
        ("dims", 1, _REP, "int64", None),
        ("data_type", 2, _OPT, ".caffe2.TensorProto.DataType", "FLOAT"),
        ("storage_type", 12, _OPT, ".caffe2.TensorProto.StorageType", "TYPED"),
        ("float_data", 3, _REP, "float!", None), ("int32_data", 4, _REP, "int32!", None),
        ("byte_data", 5, _OPT, "bytes", None), ("string_data", 6, _REP, "bytes", None),
        ("double_data", 9, _REP, "double!", None), ("int64_data", 10, _REP, "int64!", None),
        ("raw_data", 13, _OPT, "bytes", None),
        ("external_data", 14, _OPT, ".caffe2.ExternalDataProto", None),
        ("name", 7, _OPT, "string", None), ("device_detail", 8, _OPT, ".caffe2.DeviceOption", None),
        ("segment", 11, _OPT, ".caffe2.TensorProto.Segment", None)],
    "QTensorProto": [
        ("dims", 1, _REP, "int64", None), ("precision", 2, _OPT, "int32", None),
        ("scale", 3, _OPT, "double", None), ("bias", 4, _OPT, "double", None),
        ("is_signed", 5, _OPT, "bool", None), ("data", 6, _REP, "int32!", None),
        ("name", 7, _OPT, "string", None),
        ("data_type", 8, _OPT, ".caffe2.TensorProto.DataType", "INT32"),
        ("scales", 9, _REP, "double", None), ("biases", 10, _REP, "double", None),
        ("axis", 11, _OPT, "int32", None), ("is_multiparam", 12, _OPT, "bool", None)],
    "TensorProtos": [("protos", 1, _REP, ".caffe2.TensorProto", None)],
    "Argument": [
        ("name", 1, _OPT, "string", None), ("f", 2, _OPT, "float", None),
        ("i", 3, _OPT, "int64", None), ("s", 4, _OPT, "bytes", None),
        ("t", 10, _OPT, ".caffe2.TensorProto", None), ("n", 8, _OPT, ".caffe2.NetDef", None),
        ("floats", 5, _REP, "float", None), ("ints", 6, _REP, "int64", None),
        ("strings", 7, _REP, "bytes", None), ("tensors", 11, _REP, ".caffe2.TensorProto", None),
        ("nets", 9, _REP, ".caffe2.NetDef", None),
        ("qtensors", 12, _REP, ".caffe2.QTensorProto", None)],
    "DeviceOption": [
        ("device_type", 1, _OPT, "int32", None), ("device_id", 2, _OPT, "int32", None),
        ("random_seed", 3, _OPT, "uint32", None), ("node_name", 4, _OPT, "string", None),
        ("numa_node_id", 5, _OPT, "int32", None), ("extra_info", 6, _REP, "string", None)],
    "OperatorDef": [
        ("input", 1, _REP, "string", None), ("output", 2, _REP, "string", None),
        ("name", 3, _OPT, "string", None), ("type", 4, _OPT, "string", None),
        ("arg", 5, _REP, ".caffe2.Argument", None),
        ("device_option", 6, _OPT, ".caffe2.DeviceOption", None),
        ("engine", 7, _OPT, "string", None), ("control_input", 8, _REP, "string", None),
        ("is_gradient_op", 9, _OPT, "bool", None), ("debug_info", 10, _OPT, "string", None),
        ("domain", 11, _OPT, "string", None), ("op_version", 12, _OPT, "int64", None)],
    "MapFieldEntry": [("key", 1, _OPT, "string", None), ("val", 2, _OPT, "string", None)],
    "BackendOptions": [("backend_name", 1, _OPT, "string", None),
                       ("option", 2, _REP, ".caffe2.MapFieldEntry", None)],
    "PartitionInfo": [("name", 1, _OPT, "string", None), ("device_id", 2, _REP, "int32", None),
                      ("extra_info", 3, _OPT, "string", None),
                      ("backend_options", 4, _REP, ".caffe2.BackendOptions", None)],
    "NetDef": [
        ("name", 1, _OPT, "string", None), ("op", 2, _REP, ".caffe2.OperatorDef", None),
        ("type", 3, _OPT, "string", None), ("num_workers", 4, _OPT, "int32", None),
        ("device_option", 5, _OPT, ".caffe2.DeviceOption", None),
        ("arg", 6, _REP, ".caffe2.Argument", None),
        ("external_input", 7, _REP, "string", None), ("external_output", 8, _REP, "string", None),
        ("partition_info", 9, _REP, ".caffe2.PartitionInfo", None)],
}
_ENUMS = {"TensorProto.DataType": DATA_TYPES,
          "TensorProto.StorageType": {"TYPED": 1, "RAW": 2, "EXTERNAL": 3, "NO_CONTENT": 4}}


def _add_fields(msg, fields):
    for name, number, label, ty, default in fields:
        f = msg.field.add(name=name, number=number, label=label)
        packed = ty.endswith("!")
        ty = ty.rstrip("!")
        if ty in _TYPES:
            f.type = _TYPES[ty]
        else:
            f.type_name = ty
            enum = ty.split(".")[-1] in ("DataType", "StorageType")
            f.type = _F.TYPE_ENUM if enum else _F.TYPE_MESSAGE
        if packed:
            f.options.packed = True
        if default is not None:
            f.default_value = default


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="glowpy/caffe2.proto", package="caffe2",
                                             syntax="proto2")
    top = {}
    for full, fields in _MESSAGES.items():
        if "." in full:
            continue
        top[full] = fdp.message_type.add(name=full)
    for full, fields in _MESSAGES.items():
        if "." in full:
            parent, name = full.split(".")
            _add_fields(top[parent].nested_type.add(name=name), fields)
        else:
            _add_fields(top[full], fields)
    for full, values in _ENUMS.items():
        parent, name = full.split(".")
        e = top[parent].enum_type.add(name=name)
        for k, v in values.items():
            e.value.add(name=k, number=v)
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())


def _cls(name):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName("caffe2." + name))


NetDef = _cls("NetDef")
OperatorDef = _cls("OperatorDef")
Argument = _cls("Argument")
TensorProto = _cls("TensorProto")
QTensorProto = _cls("QTensorProto")
TensorProtos = _cls("TensorProtos")
DeviceOption = _cls("DeviceOption")
PartitionInfo = _cls("PartitionInfo")
BackendOptions = _cls("BackendOptions")
MapFieldEntry = _cls("MapFieldEntry")
