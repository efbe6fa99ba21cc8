"""Type stub of a mojolearn native module (gpu); rendered from
mojolearn/_core/api.py by `python -m mojolearn._core.api --write-stubs`."""

def to_bf16(args: tuple[int, int, int, int], /) -> None: ...  # (src_f32: int, dst_u16: int, n: int, tasks: int)
def from_bf16(args: tuple[int, int, int, int], /) -> None: ...  # (src_u16: int, dst_f32: int, n: int, tasks: int)
def quantize_int8(args: tuple[int, int, int, int, int, int], /) -> None: ...  # (src_f32: int, codes_i8: int, exps_i32: int, m: int, k: int, tasks: int)
def quantize_int15(args: tuple[int, int, int, int, int, int, int], /) -> None: ...  # (src_f32: int, hi_i8: int, lo_i8: int, exps_i32: int, m: int, k: int, tasks: int)
def dequantize_int8(args: tuple[int, int, int, int, int, int], /) -> None: ...  # (codes_i8: int, exps_i32: int, dst_f32: int, m: int, k: int, tasks: int)
def dequantize_int15(args: tuple[int, int, int, int, int, int, int], /) -> None: ...  # (hi_i8: int, lo_i8: int, exps_i32: int, dst_f32: int, m: int, k: int, tasks: int)
def gemm_f32(args: tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int, int], /) -> int: ...  # (a: int, b: int, c: int, m: int, n: int, k: int, trans_a: int, trans_b: int, a_bf16: int, b_bf16: int, mode: int, tasks: int, sabotage: int, ws_addr: int, ws_bytes: int)
def gemm_int8(args: tuple[int, int, int, int, int, int, int, int, int, int, int, int], /) -> int: ...  # (a_codes: int, a_exps: int, b_codes: int, b_exps: int, c: int, m: int, n: int, k: int, tasks: int, sabotage: int, ws_addr: int, ws_bytes: int)
def gemm_int15(args: tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int], /) -> int: ...  # (a_hi: int, a_lo: int, a_exps: int, b_hi: int, b_lo: int, b_exps: int, c: int, m: int, n: int, k: int, tasks: int, sabotage: int, ws_addr: int, ws_bytes: int)
def strided_copy(args: tuple[int, int, int, int, list[int], list[int]], /) -> None: ...  # (src: int, dst: int, itemsize: int, ndim: int, shape: list[int], byte_strides: list[int])
def mxcsr(args: tuple[()], /) -> int: ...
def device_info(args: tuple[()], /) -> tuple[str, str]: ...
def gemm_f32_resident(args: tuple[int, int, int, int, int, int, int, int, int, int, int, int], /) -> int: ...  # (a: int, b: int, c: int, m: int, n: int, k: int, trans_a: int, trans_b: int, a_bf16: int, b_bf16: int, mode: int, sabotage: int)
def vendor_blas(args: tuple[()], /) -> tuple[str, str, str]: ...
def gemm_int8_resident(args: tuple[int, int, int, int, int, int, int, int], /) -> None: ...  # (a_codes: int, a_exps: int, b_codes: int, b_exps: int, c: int, m: int, n: int, k: int)
def gemm_int15_resident(args: tuple[int, int, int, int, int, int, int, int, int, int], /) -> None: ...  # (a_hi: int, a_lo: int, a_exps: int, b_hi: int, b_lo: int, b_exps: int, c: int, m: int, n: int, k: int)
def gemm_int15_quant_a_resident(args: tuple[int, int, int, int, int, int, int, int], /) -> None: ...  # (a: int, b_hi: int, b_lo: int, b_exps: int, c: int, m: int, n: int, k: int)
def nn_add_resident(args: tuple[int, int, int, int, int, int, int, int], /) -> None: ...  # (x: int, ldx: int, y: int, ldy: int, out: int, ldo: int, n: int, rows: int)
def dev_alloc(args: tuple[int], /) -> int: ...  # (nbytes: int)
def dev_free(args: tuple[int, int], /) -> None: ...  # (address: int, nbytes: int)
def dev_upload(args: tuple[int, int, int], /) -> None: ...  # (dst_dev: int, src_host: int, nbytes: int)
def dev_download(args: tuple[int, int, int], /) -> None: ...  # (dst_host: int, src_dev: int, nbytes: int)
def dev_zero(args: tuple[int, int], /) -> None: ...  # (address: int, nbytes: int)
def dev_memory(args: tuple[()], /) -> tuple[int, ...]: ...
def nn_program_dev(args: tuple[list[tuple]], /) -> None: ...  # (ops: list[tuple])
