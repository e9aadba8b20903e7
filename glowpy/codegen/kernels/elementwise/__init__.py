"""Elementwise kernels: arithmetic and math functions, comparisons and logic, Softplus, FusedElementwise."""
