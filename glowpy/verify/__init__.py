"""model-verify: per-layer comparison of a compiled bundle with onnxruntime (cli.py: the
command; observe.py: which tensors and the models exposing them; execute.py: running the
bundle on the host or under QEMU; compare.py: error figures, tolerance, table, JSON)."""
