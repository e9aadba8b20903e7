"""`image-classifier`: Glow's image classification workflow on a bundle run in-process.

    image-classifier digit2.pgm digit9.png -model=mnist8.onnx -image-mode=0to255 -topk=3
    image-classifier imgs/*.png -model=resnet.onnx -image-mode=0to1 -dump-profile=p.yaml
    image-classifier imgs/*.png -model=resnet.onnx -load-profile=p.yaml -emit-bundle=out

Images (PNG, PPM/PGM, JPEG, BMP: whatever Pillow decodes; Pillow is the optional extra
`glowpy[images]`) must have the model input's height and width; they are never resized
silently. Each pixel is scaled to the range of `-image-mode` as Glow does (0to1: p/255,
0to255: p, neg1to1: p/127.5 - 1, neg128to127: p - 128), then per channel (x - mean) / stddev
(`-mean`, `-stddev`), laid out as `-image-layout` (NCHW or NHWC) in `-image-channel-order`
(Glow's default BGR). A model with batch size N takes the images N at a time.

The model is compiled for the host (into `-emit-bundle` when given, else a temporary
directory) and run by glowpy.runtime in this process. `-dump-profile` also runs the float
model's op references over the images and writes the profile for `-load-profile`, Glow's
quantization flow; with `-load-profile` the bundle is the int8 one."""
from __future__ import annotations

import os
import sys
import tempfile
from typing import List, Optional

import numpy as np
import typer

from glowpy.errors import ModelError, UsageError, show
from glowpy.ir.dtypes import HALF

app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["--help", "-h"]})

MODES = {"0to1": (1 / 255, 0.0), "0to255": (1.0, 0.0), "neg1to1": (1 / 127.5, -1.0),
         "neg128to127": (1.0, -128.0)}


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise UsageError("image-classifier decodes images with Pillow: pip install "
                         "'glowpy[images]'") from None
    return Image


def _floats(option: str, text: str | None, channels: int, default: float) -> np.ndarray:
    if text is None:
        return np.full(channels, default, np.float32)
    try:
        vals = [float(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"-{option}={text}: expected one number or one per channel, "
                         "comma separated") from None
    if len(vals) not in (1, channels) or not all(np.isfinite(vals)):
        raise UsageError(f"-{option}={text}: expected one finite number or {channels} "
                         "(one per channel)")
    if option == "stddev" and any(v == 0 for v in vals):
        raise UsageError(f"-stddev={text}: a standard deviation of 0 divides by zero")
    return np.broadcast_to(np.asarray(vals, np.float32), (channels,)).copy()


class Preprocess:
    """Image file -> the model input's pixels for one batch item."""

    def __init__(self, shape, layout: str, mode: str, order: str, mean, stddev):
        if layout not in ("NCHW", "NHWC"):
            raise UsageError(f"-image-layout={layout}: expected NCHW or NHWC")
        if mode not in MODES:
            raise UsageError(f"-image-mode={mode}: expected one of {', '.join(MODES)}")
        if order not in ("BGR", "RGB"):
            raise UsageError(f"-image-channel-order={order}: expected BGR or RGB")
        if len(shape) != 4:
            raise ModelError(f"the model input is {list(shape)}; image-classifier needs a 4-D "
                             "image input (N,C,H,W or N,H,W,C with -image-layout=NHWC)")
        n, c, h, w = shape if layout == "NCHW" else (shape[0], shape[3], shape[1], shape[2])
        if c not in (1, 3):
            raise ModelError(f"the model input {list(shape)} has {c} channels in {layout}; "
                             "images have 1 (grayscale) or 3 (color): check -image-layout")
        self.batch, self.c, self.h, self.w = n, c, h, w
        self.layout, self.mode, self.order = layout, mode, order
        self.mean = _floats("mean", mean, c, 0.0)
        self.stddev = _floats("stddev", stddev, c, 1.0)

    def __call__(self, path: str) -> np.ndarray:
        Image = _pillow()
        try:
            with Image.open(path) as im:
                if im.size != (self.w, self.h):  # (checked before decoding any pixel)
                    raise ModelError(f"image '{show(path)}' is {im.size[0]}x{im.size[1]}; the "
                                     f"model takes {self.w}x{self.h} images (resize it first)")
                px = np.asarray(im.convert("L" if self.c == 1 else "RGB"), np.float32)
        except ModelError:
            raise
        except (OSError, ValueError, Image.DecompressionBombError) as e:
            raise ModelError(f"cannot read image '{show(path)}': {e}") from None
        if self.c == 1:
            px = px[:, :, None]
        elif self.order == "BGR":
            px = px[:, :, ::-1]
        scale, shift = MODES[self.mode]
        x = (px * np.float32(scale) + np.float32(shift) - self.mean) / self.stddev
        return np.ascontiguousarray(x if self.layout == "NHWC" else x.transpose(2, 0, 1))


def classify(images: list[str], model: str, input_name: str | None, pre_args: dict,
             topk: int, bundle_dir: str | None, opts, dump_profile: str | None) -> list:
    """[(image, [(label, value), ...])] for every image, top-k by value."""
    import glowpy
    from glowpy.compiler import load_graph
    from glowpy.runtime import Bundle
    graph = load_graph([model], opts)
    names = [v.name for v in graph.inputs]
    if input_name is None:
        if len(names) != 1:
            raise UsageError(f"the model has inputs {', '.join(show(n) for n in names)}; name "
                             "the image input with -model-input-name")
        input_name = names[0]
    elif input_name not in names:
        raise UsageError(f"-model-input-name={show(input_name)}: the model's inputs are "
                         f"{', '.join(show(n) for n in names)}")
    if len(names) != 1:
        raise UsageError("image-classifier feeds one image input; the model has "
                         f"{len(names)} inputs")
    value = graph.inputs[0]
    pre = Preprocess(value.shape, **pre_args)
    pixels = [pre(p) for p in images]
    batches = [pixels[i:i + pre.batch] for i in range(0, len(pixels), pre.batch)]
    # a short last batch is filled with its last image (results dropped; profile ranges kept)
    feeds = [np.stack(b + [b[-1]] * (pre.batch - len(b))) for b in batches]
    dtype = value.dtype
    if dtype in HALF:  # a float16/bfloat16 model: its pixels rounded as the model takes them
        feeds = [f.astype(dtype) for f in feeds]
    elif dtype != np.float32:
        if dtype.kind not in "iu":
            raise ModelError(f"the image input '{show(input_name)}' is {dtype.name}; "
                             "image-classifier feeds float32 or integer pixels")
        info = np.iinfo(dtype)
        if any(f.min() < info.min or f.max() > info.max or np.any(f != np.round(f))
               for f in feeds):
            raise UsageError(f"the image input is {dtype.name}: choose an -image-mode whose "
                             "pixel values it holds (0to255 for uint8, neg128to127 for int8)")
        feeds = [f.astype(dtype) for f in feeds]
    if dump_profile:
        from glowpy.profiler import profile_samples, profiling_graph
        pg = profiling_graph([model], opts)
        profile_samples(pg, {pg.inputs[0]: feeds}, dump_profile, model)
    with tempfile.TemporaryDirectory(prefix="glowpy-classify-") as tmp:
        out_dir = bundle_dir or os.path.join(tmp, "bundle")
        info = glowpy.compile(model, out_dir, **{k: getattr(opts, k) for k in (
            "network_name", "model_inputs", "symbols", "load_profile", "quantization_schema",
            "quantization_precision_bias", "enable_channelwise", "quantization_calibration",
            "keep_original_precision_for_nodes")})
        bundle = Bundle(out_dir, name=info.name)
        results = []
        for b, feed in zip(batches, feeds):
            outputs = bundle.run({input_name: feed})
            scores = np.asarray(next(iter(outputs.values())), np.float64).reshape(pre.batch, -1)
            for j in range(len(b)):
                s = scores[j]
                order = np.argsort(-s, kind="stable")[:topk]
                results.append([(int(k), float(s[k])) for k in order])
    return list(zip(images, results))


@app.command(help="Classify images with a model through its bundle (Glow's image-classifier).")
def image_classifier(
    images: Optional[List[str]] = typer.Argument(None, help="Image files (PNG, PPM/PGM, JPEG...)."),
    model: Optional[str] = typer.Option(None, "--model", "--m", help="Model file (.onnx)."),
    model_input_name: Optional[str] = typer.Option(None, "--model-input-name", help="The image input (default: the model's only input)."),
    image_mode: str = typer.Option("0to1", "--image-mode", help="Pixel range: 0to1, 0to255, neg1to1 or neg128to127."),
    image_layout: str = typer.Option("NCHW", "--image-layout", help="NCHW or NHWC."),
    image_channel_order: str = typer.Option("BGR", "--image-channel-order", help="BGR (Glow's default) or RGB."),
    mean: Optional[str] = typer.Option(None, "--mean", help="Per-channel mean subtracted after scaling: one value or one per channel."),
    stddev: Optional[str] = typer.Option(None, "--stddev", help="Per-channel divisor after the mean: one value or one per channel."),
    topk: int = typer.Option(1, "--topk", help="How many labels to print per image."),
    emit_bundle: Optional[str] = typer.Option(None, "--emit-bundle", help="Also keep the bundle in this directory."),
    network_name: Optional[str] = typer.Option(None, "--network-name", help="Bundle name."),
    dump_profile: Optional[str] = typer.Option(None, "--dump-profile", help="Write the quantization profile of the float model over the images (for -load-profile)."),
    load_profile: Optional[str] = typer.Option(None, "--load-profile", help="Classify with the int8 bundle quantized with this profile."),
    quantization_schema: str = typer.Option("asymmetric", "--quantization-schema", help="With -load-profile (see model-compiler)."),
    enable_channelwise: bool = typer.Option(False, "--enable-channelwise", help="With -load-profile: one weight scale per output channel."),
    model_input: Optional[List[str]] = typer.Option(None, "--model-input", help="Input type and shape: name,type,[d0,d1,...] (repeatable)."),
    onnx_define_symbol: Optional[List[str]] = typer.Option(None, "--onnx-define-symbol", help="Fix a symbolic dimension: name,value (repeatable)."),
    verbose: bool = typer.Option(False, "--verbose", help="Show internals on errors."),
):
    from glowpy.cli import parse_model_input, parse_symbols
    from glowpy.compiler import Options
    if not images:
        raise UsageError("give the image files to classify")
    if not model:
        raise UsageError("-model is required (the model to classify with)")
    if topk < 1:
        raise UsageError(f"-topk={topk}: must be at least 1")
    if dump_profile and load_profile:
        raise UsageError("-dump-profile profiles the float model; give -load-profile in the "
                         "next run")
    opts = Options(network_name=network_name,
                   model_inputs=[parse_model_input(t) for t in model_input or []],
                   symbols=parse_symbols(onnx_define_symbol), load_profile=load_profile,
                   quantization_schema=quantization_schema, enable_channelwise=enable_channelwise)
    pre = {"layout": image_layout, "mode": image_mode, "order": image_channel_order,
           "mean": mean, "stddev": stddev}
    for path, labels in classify(images, model, model_input_name, pre, topk, emit_bundle, opts,
                                 dump_profile):
        print(f" File: {path}")
        for k, (label, value) in enumerate(labels, 1):
            print(f"\tLabel-K{k}: {label} (score: {value:.4f})")
    if dump_profile:
        print(f"image-classifier: wrote the profile of {len(images)} image(s) to {dump_profile}",
              file=sys.stderr)


def main():
    from glowpy.cli import exit_main
    exit_main("image-classifier", app)
