"""Reductions (ReduceX, ArgMax, Softmax...) and normalizations."""
