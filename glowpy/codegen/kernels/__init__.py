"""Kernel generators, grouped by op family (conv/, pool/, gemm/, int8/, elementwise/, tensor/,
reduce/), on shared machinery in this package's modules (vectors, accumulators, tiles,
vector_epilogue, epilogue, window). Each family registers its variants with
glowpy.codegen.registry; `catalog` imports every family. Nothing here imports upward."""
