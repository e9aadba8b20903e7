"""Pooling kernels: vectorized float windows and whole planes, and the generic ones."""
