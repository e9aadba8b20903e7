"""Matrix products: register-blocked float Gemm/MatMul, the generic row kernels, Einsum."""
