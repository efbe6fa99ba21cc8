"""The caller's workspace: a byte buffer the Python layer keeps between calls (so the
packed panels do not fault in fresh pages on every call). Its address is whatever the
allocator gave (16-byte aligned for a ctypes array); the kernels load 64-byte rows
and whole tiles from it, which split across cache lines unless the packed data start
on a 64-byte boundary. So the entries take the 64-byte-aligned part of the buffer and
ask for WS_ALIGN bytes more than their packed data need."""

comptime WS_ALIGN = 64


@always_inline
def ws_take(addr: Int, have: Int, need: Int) -> Int:
    """The 64-byte-aligned address of `need` bytes inside the caller's workspace
    (addr, have bytes), or 0 when it is absent or too small."""
    if addr == 0:
        return 0
    var a = (addr + WS_ALIGN - 1) // WS_ALIGN * WS_ALIGN
    if a + need > addr + have:
        return 0
    return a


@always_inline
def ws_request(need: Int) -> Int:
    """The workspace bytes to keep for the next call that needs `need` aligned bytes."""
    return need + WS_ALIGN
