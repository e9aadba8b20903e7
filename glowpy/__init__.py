"""glowpy: an ahead-of-time compiler from ONNX and Caffe2 models to Glow-compatible bundles."""
from glowpy.version import __version__  # noqa: F401


def compile(model, output_dir, **options):  # noqa: A001 - mirrors the tool's verb
    """Compiles `model` (a path, or [predict, init] for Caffe2) into a bundle in `output_dir`.
    Keyword options are those of glowpy.compiler.Options (network_name, bundle_api, target,
    mcpu, float_abi, model_inputs, ...). Returns a BundleInfo."""
    from glowpy.compiler import Options, compile_model
    return compile_model(model, output_dir, Options(**options))
