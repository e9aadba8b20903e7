"""Integer kernels: QConv (with the Arm DSP paths), QMatMul, quantize/requantize, tables, QAdd, QAvgPool, QSoftmax, QFinish (after the float kernels' exact sums)."""
