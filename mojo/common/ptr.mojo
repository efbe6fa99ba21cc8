"""Typed pointers from the integer addresses the Python layer passes."""

comptime F32Ptr = Pointer[Float32, MutAnyOrigin]
comptime U16Ptr = Pointer[UInt16, MutAnyOrigin]
comptime U32Ptr = Pointer[UInt32, MutAnyOrigin]
comptime I8Ptr = Pointer[Int8, MutAnyOrigin]
comptime U8Ptr = Pointer[UInt8, MutAnyOrigin]
comptime I32Ptr = Pointer[Int32, MutAnyOrigin]
comptime I64Ptr = Pointer[Int64, MutAnyOrigin]


@always_inline
def ptr_f32(addr: Int) -> F32Ptr:
    return F32Ptr(unsafe_from_address=addr)


@always_inline
def ptr_u16(addr: Int) -> U16Ptr:
    return U16Ptr(unsafe_from_address=addr)


@always_inline
def ptr_u32(addr: Int) -> U32Ptr:
    return U32Ptr(unsafe_from_address=addr)


@always_inline
def ptr_i8(addr: Int) -> I8Ptr:
    return I8Ptr(unsafe_from_address=addr)


@always_inline
def ptr_u8(addr: Int) -> U8Ptr:
    return U8Ptr(unsafe_from_address=addr)


@always_inline
def ptr_i32(addr: Int) -> I32Ptr:
    return I32Ptr(unsafe_from_address=addr)


@always_inline
def ptr_i64(addr: Int) -> I64Ptr:
    return I64Ptr(unsafe_from_address=addr)
