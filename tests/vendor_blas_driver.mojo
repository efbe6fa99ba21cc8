"""The host side of numeric_mode fast's vendor route (mojo/gemm/gpu/vendor.mojo), run
without a GPU against a stand-in library (tests/fake_blas.c, put on LD_LIBRARY_PATH by
tests/test_vendor_blas.py): which library it finds, what it refuses, and whether the
row-major to column-major mapping of every layout gives A B.

    mojo build -I mojo --target-accelerator sm_90 tests/vendor_blas_driver.mojo -o X

Prints one line `library: NAME | FILE | REASON`, then, when a library loaded, one line
per case: `case m n k ta tb tf32: ok|DIFFER compute=C math=M calls=N`.
"""
from std.ffi import OwnedDLHandle
import gemm.gpu.vendor as V
from _cublas.cublas import cublasCreate, check_cublas_error
from _rocblas.rocblas import rocblas_create_handle
from _rocblas.types import Handle as RocHandle
import _rocblas


def _fill(n: Int, seed: Int) -> List[Float32]:
    var out = List[Float32]()
    for i in range(n):
        out.append(Float32(((i * 7 + seed * 3) % 11) - 5))
    return out^


def main() raises:
    var got = V.library()
    print(String("library: ", got[0], " | ", got[1], " | ", got[2]))
    try:
        V.require()
        print("require: ok")
    except e:
        print(String("require: ", e))
    if not got[1]:
        return
    var fake = OwnedDLHandle(got[1])
    var shapes = [(1, 1, 1), (3, 5, 7), (4, 1, 9), (1, 6, 2), (5, 4, 3), (2, 3, 1)]
    var layouts = [(False, False), (False, True), (True, False)]
    var modes = List[Bool]()
    modes.append(False)
    if V.IS_NVIDIA:
        modes.append(True)
    var cu = V.CuHandle(None)
    var roc = RocHandle()
    comptime if V.IS_NVIDIA:
        check_cublas_error(cublasCreate(Pointer(to=cu)))
    elif V.IS_AMD:
        _rocblas.check_error(rocblas_create_handle(Pointer(to=roc)))
    for s in shapes:
        var m = s[0]
        var n = s[1]
        var k = s[2]
        for lay in layouts:
            var ta = lay[0]
            var tb = lay[1]
            for tf32 in modes:
                var a = _fill(m * k, 1)
                var b = _fill(n * k, 2)
                var c = List[Float32](length=m * n, fill=Float32(12345))
                comptime if V.IS_NVIDIA:
                    V._cublas_gemm(cu, Int(a.unsafe_ptr()), Int(b.unsafe_ptr()), Int(c.unsafe_ptr()),
                                   m, n, k, ta, tb, tf32)
                elif V.IS_AMD:
                    V._rocblas_gemm(roc, Int(a.unsafe_ptr()), Int(b.unsafe_ptr()), Int(c.unsafe_ptr()),
                                    m, n, k, ta, tb)
                var ok = True
                for i in range(m):
                    for j in range(n):
                        var want = Float32(0)
                        for p in range(k):
                            var x = a[p * m + i] if ta else a[i * k + p]
                            var y = b[j * k + p] if tb else b[p * n + j]
                            want += x * y
                        if c[i * n + j] != want:
                            ok = False
                var compute = fake.call["fake_last_compute", Int32]()
                var math = fake.call["fake_last_math", Int32]()
                var calls = fake.call["fake_calls", Int32]()
                print(String(
                    "case ", m, " ", n, " ", k, " ", Int(ta), " ", Int(tb), " ", Int(tf32), ": ",
                    "ok" if ok else "DIFFER", " compute=", compute, " math=", math, " calls=", calls,
                ))
