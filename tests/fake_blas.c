/* A stand-in for cuBLAS (-DFAKE_CUBLAS) or rocBLAS on host memory, for
   tests/test_vendor_blas.py: the column-major GEMM the BLAS documents, computed
   naively, so the row-major mapping of mojo/gemm/gpu/vendor.mojo can be checked
   without a GPU. It records the compute type and math mode it was last given.
   -DFAKE_NO_GEMMEX leaves out cublasGemmEx (a library the route must refuse). */
static int last_compute = -1, last_math = -1, calls = 0;

static float op_at(const float *x, int ld, int transposed, int r, int c) {
    return transposed ? x[c + (long)r * ld] : x[r + (long)c * ld];
}

static void colmajor_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a,
                          int lda, const float *b, int ldb, float beta, float *c, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)op_at(a, lda, ta, i, p) * op_at(b, ldb, tb, p, j);
            float old = c[i + (long)j * ldc];
            c[i + (long)j * ldc] = (float)(alpha * s + (beta == 0 ? 0 : beta * old));
        }
    calls++;
}

#ifdef FAKE_CUBLAS
int cublasCreate_v2(void **h) { *h = (void *)0x1000; return 0; }
int cublasSetStream_v2(void *h, void *s) { (void)h; (void)s; return 0; }
int cublasSetMathMode(void *h, int mode) { (void)h; last_math = mode; return 0; }
#ifndef FAKE_NO_GEMMEX
/* CUBLAS_OP_N 0, CUBLAS_OP_T 1; CUDA_R_32F 0 */
int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                 const void *a, int atype, int lda, const void *b, int btype, int ldb,
                 const void *beta, void *c, int ctype, int ldc, int compute, int algo) {
    (void)h; (void)algo;
    if (atype != 0 || btype != 0 || ctype != 0 || ta > 1 || tb > 1) return 7;
    last_compute = compute;
    colmajor_gemm(ta, tb, m, n, k, *(const float *)alpha, a, lda, b, ldb,
                  *(const float *)beta, c, ldc);
    return 0;
}
#endif
#else
int rocblas_create_handle(void **h) { *h = (void *)0x1000; return 0; }
int rocblas_set_stream(void *h, void *s) { (void)h; (void)s; return 0; }
/* rocblas_operation_none 111, rocblas_operation_transpose 112 */
int rocblas_sgemm(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                  const float *a, int lda, const float *b, int ldb, const float *beta, float *c,
                  int ldc) {
    (void)h;
    if ((ta != 111 && ta != 112) || (tb != 111 && tb != 112)) return 3;
    colmajor_gemm(ta == 112, tb == 112, m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc);
    return 0;
}
#endif

int fake_last_compute(void) { return last_compute; }
int fake_last_math(void) { return last_math; }
int fake_calls(void) { return calls; }
