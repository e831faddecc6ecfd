# Writing Kafka record-level varints (on-disk-format.md §0.1): zigzag over
# LEB128, shortest form; and big-endian header fields. Reading varints is
# records.h's ls_varint / ls_varlong. Included textually so hot loops inline them.
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


cdef inline int32_t read_be32(const unsigned char* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int64_t read_be64(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t><uint32_t>read_be32(p) << 32) | <uint32_t>read_be32(p + 4))


cdef inline int16_t read_be16(const unsigned char* p) noexcept nogil:
    return <int16_t>((p[0] << 8) | p[1])


cdef inline void write_be16(unsigned char* p, int16_t v) noexcept nogil:
    p[0] = <unsigned char>((<uint32_t><uint16_t>v) >> 8)
    p[1] = <unsigned char>v


cdef inline void write_be32(unsigned char* p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = <unsigned char>(u >> 24)
    p[1] = <unsigned char>(u >> 16)
    p[2] = <unsigned char>(u >> 8)
    p[3] = <unsigned char>u


cdef inline void write_be64(unsigned char* p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    write_be32(p, <int32_t>(u >> 32))
    write_be32(p + 4, <int32_t><uint32_t>u)
