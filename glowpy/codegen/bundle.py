"""Writes the files of a bundle (DESIGN.md, Bundle format): NAME.o, NAME.h, NAME.weights.bin,
NAME.weights.txt and NAME.json. Everything is computed here; the templates only format."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import jinja2
import numpy as np
from numpy.lib.stride_tricks import as_strided

from glowpy.codegen.kernels.conv import runtime_weights, winograd_select
from glowpy.codegen.kernels.gemm import blocking as gemm_blocking
from glowpy.codegen.names import comment_text, legalize
from glowpy.ir.dtypes import GLOW_NAMES
from glowpy.ir.program import ALIGN

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("glowpy", "templates"), trim_blocks=True,
                          lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
                          undefined=jinja2.StrictUndefined)


@dataclass
class Placeholder:
    name: str  # as in the model
    symbol: str  # legalized, unique
    dtype: np.dtype
    shape: tuple
    offset: int
    kind: str  # "input" | "output" | "inout"
    quant: tuple | None = None

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.elements * np.dtype(self.dtype).itemsize


def weights_image(prog) -> bytes:
    img = bytearray(prog.sizes["constant"])
    for c in prog.constants:
        raw = np.ascontiguousarray(c.data).astype(c.dtype, copy=False).tobytes()
        img[c.offset:c.offset + len(raw)] = raw
    return bytes(img)


_BYTE_TEXT = np.frombuffer("".join(f" 0X{i:02X}," for i in range(256)).encode(),
                           np.uint8).reshape(256, 6)
_HEX_PAIR = np.frombuffer("".join(f"{i:02X}" for i in range(256)).encode(), np.uint16)
_CELL = np.frombuffer(b" 0X00,", np.uint8)  # one byte's text, its two digits at [3:5]


def weights_text(image: bytes):
    """` 0X%02X,` per byte, a newline after every 20 bytes and one at the end, as chunks of
    bytes (vectorized and streamed: images reach hundreds of MB and the text is 6x that).
    A chunk's rows are one buffer whose spaces, "0X", commas and newlines are written once;
    per chunk only the two hex digits of each byte are, as one 16-bit item of a table (in
    the host's byte order, as the buffer is read): 0.40 -> 0.17 s for ResNet-18's 47 MB on
    the AVX2 EPYC, where the 6-byte items taken per byte before cost 0.4 s of its 0.75 s
    write stage. The buffer is reused: each chunk must be consumed (written) before the
    next is asked for, as file writes do."""
    data = np.frombuffer(image, np.uint8)
    full = len(data) // 20 * 20
    step = 20 << 14  # 320 KiB of weights, 1.9 MiB of text per chunk
    buf = digits = None
    for i in range(0, full, step):
        part = data[i:min(i + step, full)]
        n = len(part) // 20
        if buf is None or len(buf) != n:
            buf = np.empty((n, 121), np.uint8)
            cells = buf[:, :120].reshape(n, 20, 6)
            cells[:] = _CELL
            buf[:, 120] = ord("\n")
            digits = cells[:, :, 3:5].view(np.uint16)[:, :, 0]
        np.take(_HEX_PAIR, part.reshape(n, 20), out=digits)
        yield memoryview(buf).cast("B")
    if full < len(data) or not len(data):
        yield _BYTE_TEXT[data[full:]].tobytes() + b"\n"


def type_str(dtype, shape) -> str:
    return f"{GLOW_NAMES.get(np.dtype(dtype), np.dtype(dtype).name)}<{' x '.join(map(str, shape))}>"


def header_text(name: str, entry: str, api: str, prog, placeholders, version: str,
                instrument: dict | None = None) -> str:
    """instrument: the instrumentation's declarations (codegen/instrument.py), or None: then
    the header is exactly that of an uninstrumented bundle."""
    upper = legalize(name).upper()
    macros = [f"{upper}_{p.symbol}" for p in placeholders]
    bound = prog.plan_info.get("lower_bound", 0)
    act = prog.sizes["activation"]
    ctx = dict(
        version=version, guard=f"_GLOW_BUNDLE_{upper}_H", model_name=comment_text(name),
        total_size=sum(prog.sizes.values()),
        efficiency=f"{(bound / act) if act else 1.0:.4f}",
        placeholders=[dict(macro=m, offset=p.offset, comment_name=comment_text(p.name),
                           type_str=type_str(p.dtype, p.shape), elements=p.elements,
                           nbytes=p.nbytes, quant=p.quant) for m, p in zip(macros, placeholders)],
        macro_width=max([len(m) for m in macros] or [0]),
        size_width=len(upper) + len("_ACTIVATIONS_MEM_SIZE"), upper=upper,
        constant_size=prog.sizes["constant"], mutable_size=prog.sizes["mutable"],
        activation_size=prog.sizes["activation"], alignment=ALIGN, entry=entry,
        config=f"{legalize(name)}_config", instrument=instrument)
    return _ENV.get_template(f"bundle_{api}.h.j2").render(**ctx)


def constant_entry(c, prog, by_name: dict) -> dict:
    """A constant's manifest entry; `layout` is "plain" for row-major bytes of the shape
    given (the model's layout; also the int8 passes' tables), else how the
    compiler stored them, for which instruction, its kernel function (module.py's
    k<index>_<op>, shared by instructions with identical kernels) and its kernel variant.
    by_name: instruction name -> the index of the first instruction of that name."""
    d = {"name": c.name, "dtype": np.dtype(c.dtype).name, "shape": list(c.shape),
         "offset": c.offset, "bytes": c.nbytes, "layout": "plain"}
    if c.layout:
        d.update(c.layout)
        idx = by_name.get(c.layout["for"])
        if idx is not None:
            ins = prog.instrs[idx]
            # the function the instruction calls (identical kernels share one: module.py)
            d["kernel"] = prog.kernels[idx] if prog.kernels else f"k{idx}_{ins.op}"
            if "variant" in ins.attrs:
                d["variant"] = ins.attrs["variant"]["name"]
    return d


def integrity(files: dict) -> dict:
    """{suffix: {"bytes", "sha256"}} of the bundle's binary files: bundle-info checks them."""
    out = {}
    for suffix, content in files.items():
        h, n = hashlib.sha256(), 0
        for chunk in ([content] if isinstance(content, (bytes, bytearray, memoryview)) else content):
            h.update(chunk)
            n += len(chunk)
        out[suffix] = {"bytes": n, "sha256": h.hexdigest()}
    return out


def manifest(name, entry, api, prog, placeholders, target, options, version) -> dict:
    def ph(p):
        d = {"name": p.name, "symbol": p.symbol, "dtype": np.dtype(p.dtype).name,
             "shape": list(p.shape), "offset": p.offset, "bytes": p.nbytes}
        if p.quant:
            d["quantization"] = {"scale": p.quant[0], "offset": p.quant[1]}
        return d
    # instructions indexed by name once: a scan of them per constant was quadratic (a
    # 192-step quantized scan has 3,000 instructions and 10,000 constants and tables)
    by_name: dict = {}
    for idx, ins in enumerate(prog.instrs):
        by_name.setdefault(ins.name, idx)
    return {
        "glowpy_version": version, "network_name": name, "entry": entry, "bundle_api": api,
        "inputs": [ph(p) for p in placeholders if p.kind in ("input", "inout")],
        "outputs": [ph(p) for p in placeholders if p.kind in ("output", "inout")],
        "constants": [constant_entry(c, prog, by_name) for c in prog.constants],
        "memory": {"constant": prog.sizes["constant"], "mutable": prog.sizes["mutable"],
                   "activations": prog.sizes["activation"],
                   "activations_lower_bound": prog.plan_info.get("lower_bound", 0),
                   # kernel scratch (Winograd convolutions' transformed tiles, run-time
                   # Conv weights and products' B packed) within the activations: memory
                   # spent for speed
                   "activations_scratch": sum(b.nbytes for b in prog.activations if b.name.endswith(
                       (winograd_select.SCRATCH, runtime_weights.SUFFIX, gemm_blocking.SCRATCH))),
                   "alignment": ALIGN},
        "target": target.describe(),
        "options": options,
    }


def write_bundle(directory: str, name: str, files: dict):
    """Writes NAME.* files into `directory` (which the caller made fresh); a file's content
    is text, bytes, or an iterable of byte chunks."""
    for suffix, content in files.items():
        chunks = ([content.encode()] if isinstance(content, str) else
                  [content] if isinstance(content, (bytes, bytearray, memoryview)) else content)
        with open(os.path.join(directory, name + suffix), "wb") as f:
            for chunk in chunks:
                f.write(chunk)


def manifest_json(m: dict) -> str:
    return json.dumps(m, indent=2, sort_keys=False) + "\n"
