"""Convolution kernels: direct (any form), pixel- and channel-vectorized register tiles, depthwise, Winograd, in-place 1x1, ConvTranspose."""
