"""The quantization passes (docs/int8.md):

  rules.py     which ops are QDQ hosts, absorbed activations, same-grid ops, views: one table
  operands.py  quantized operands behind DequantizeLinear; integer weights and zero points
  fold.py      the QDQ pass, fold_quantization: quantized patterns -> integer ops
  patterns.py  its patterns, one per float op (the Folder)
  qlinear.py   QLinearConv / ConvInteger / QLinearMatMul / MatMulInteger -> integer ops
  profile.py   -load-profile: QDQ pairs from profiled ranges, then the QDQ pass"""
