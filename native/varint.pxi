# Writing Kafka record-level varints (on-disk-format.md §0.1): zigzag over
# LEB128, shortest form. Reading varints is records.h's ls_varint / ls_varlong;
# big-endian header fields are batch_header.pxd's. Included textually so hot
# loops inline them.
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t

cdef inline Py_ssize_t uvarint_size(uint64_t v) noexcept nogil:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline uint64_t zigzag64(int64_t n) noexcept nogil:
    return (<uint64_t>n << 1) ^ <uint64_t>(n >> 63)


cdef inline uint32_t zigzag32(int32_t n) noexcept nogil:
    return (<uint32_t>n << 1) ^ <uint32_t>(n >> 31)


cdef inline Py_ssize_t varint_size(int32_t n) noexcept nogil:
    return uvarint_size(zigzag32(n))


cdef inline Py_ssize_t varlong_size(int64_t n) noexcept nogil:
    return uvarint_size(zigzag64(n))


cdef inline unsigned char* write_uvarint(unsigned char* p, uint64_t v) noexcept nogil:
    while v >= 0x80:
        p[0] = <unsigned char>((v & 0x7F) | 0x80)
        p += 1
        v >>= 7
    p[0] = <unsigned char>v
    return p + 1


cdef inline unsigned char* write_varint(unsigned char* p, int32_t n) noexcept nogil:
    return write_uvarint(p, zigzag32(n))


cdef inline unsigned char* write_varlong(unsigned char* p, int64_t n) noexcept nogil:
    return write_uvarint(p, zigzag64(n))
