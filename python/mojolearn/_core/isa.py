"""The CPU builds of the extension: one plain table, read by the build
(build_native.py) and by the loader (mojolearn._core.cpu). No imports, no code that runs.

Each row: the ISA name (what ``MOJOLEARN_ISA`` and ``mojolearn.cpu_isa()`` say), the
module it is built as, the compiler's target CPU and extra target features, and what
a CPU must have to run it: cpuid feature names (mojolearn._core.cpu.FEATURES), the XCR0
register-state bits the OS must enable, and whether the process must first get the
kernel's permission for AMX tile data. Rows are best first: at import the first row
this CPU can run is loaded.

WHY THESE THREE
    v3  = x86-64-v3 (AVX2 + FMA): the floor; every x86-64 CPU of the last decade.
    v4  = x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) + AVX512-VNNI: x86-64-v4 alone lacks
          VNNI (the int8 dot-product instruction), so it is added.
    amx = v4 + AMX tile/int8/bf16 (Sapphire Rapids and newer): the int GEMMs run on
          the tile unit. Built from x86-64-v4 plus exactly these features, not from
          `sapphirerapids`, so that what the CPU check asks is exactly what the build
          may use (sapphirerapids also allows AVX-VNNI, AVX512-FP16 and more).
"""

V3_FEATURES = ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cx16", "lahf", "xsave",
               "osxsave", "avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "lzcnt", "movbe")
V4_FEATURES = V3_FEATURES + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl",
                             "avx512vnni")
AMX_FEATURES = V4_FEATURES + ("amx-tile", "amx-int8", "amx-bf16")

XCR0_AVX = 0x6  # SSE + AVX (YMM) state
XCR0_AVX512 = 0xE6  # + opmask, ZMM_Hi256, Hi16_ZMM
XCR0_AMX = 0x600E6  # + XTILECFG, XTILEDATA

# name, module, --target-cpu, --target-features, cpu features, xcr0 bits, amx permission
ISAS = (
    ("amx", "_native_amx", "x86-64-v4", "+avx512vnni,+amx-tile,+amx-int8,+amx-bf16",
     AMX_FEATURES, XCR0_AMX, True),
    ("v4", "_native_v4", "x86-64-v4", "+avx512vnni", V4_FEATURES, XCR0_AVX512, False),
    ("v3", "_native_v3", "x86-64-v3", "", V3_FEATURES, XCR0_AVX, False),
)

# the probe: built for baseline x86-64 (runs on every x86-64 CPU), a C library
PROBE = ("_cpuprobe", "probe/cpuprobe.mojo", "x86-64")
