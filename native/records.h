/* Parsing one v2 record (on-disk-format.md §2.5), shared by every decoder.
 *
 * Written in C rather than Cython so that it is always inlined into the
 * decoders' loops: the parsed fields then stay in registers instead of going
 * through memory, which is most of a record's cost for small records.
 *
 *   record: length varint, attributes int8, timestampDelta varlong,
 *           offsetDelta varint, keyLength varint, key, valueLength varint,
 *           value, headerCount varint, headers
 *   header: keyLength varint (>= 0), key, valueLength varint, value
 *
 * Negative key/value lengths mean null, as in Kafka's reader.
 */
#ifndef LOGSTORE_RECORDS_H
#define LOGSTORE_RECORDS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <Python.h>

#define LS_INLINE static inline __attribute__((always_inline))
#define LS_UNLIKELY(x) __builtin_expect(!!(x), 0)

typedef struct {
    int64_t timestamp_delta;
    int32_t offset_delta;
    Py_ssize_t key_pos;      /* -1: null key */
    int32_t key_len;
    Py_ssize_t value_pos;    /* -1: null value */
    int32_t value_len;
    int32_t header_count;
    Py_ssize_t headers_pos;
    Py_ssize_t end;
} ls_record;

typedef struct {
    const char *message;
    Py_ssize_t position;
} ls_error;

/* Zigzag int32 varint at most 5 bytes long; returns the next position, or -1. */
LS_INLINE Py_ssize_t ls_varint(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int32_t *out)
{
    uint32_t u, b;
    int shift;
    if (LS_UNLIKELY(pos >= end))
        return -1;
    b = p[pos++];
    if (b < 0x80) {
        *out = (int32_t)((b >> 1) ^ (0u - (b & 1)));
        return pos;
    }
    u = b & 0x7F;
    /* Record lengths and ordinary offset deltas take two bytes. */
    if (pos < end && p[pos] < 0x80) {
        u |= (uint32_t)p[pos] << 7;
        *out = (int32_t)((u >> 1) ^ (0u - (u & 1)));
        return pos + 1;
    }
    for (shift = 7;; shift += 7) {
        if (LS_UNLIKELY(pos >= end))
            return -1;
        b = p[pos++];
        u |= (b & 0x7F) << shift;  /* bits past 32 fall off, as in Kafka */
        if (b < 0x80)
            break;
        if (LS_UNLIKELY(shift == 28))
            return -1;
    }
    *out = (int32_t)((u >> 1) ^ (0u - (u & 1)));
    return pos;
}

/* Zigzag int64 varlong at most 10 bytes long; returns the next position, or -1. */
LS_INLINE Py_ssize_t ls_varlong(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int64_t *out)
{
    uint64_t u, b;
    int shift;
    if (LS_UNLIKELY(pos >= end))
        return -1;
    b = p[pos++];
    if (b < 0x80) {
        *out = (int64_t)((b >> 1) ^ (0u - (b & 1)));
        return pos;
    }
    u = b & 0x7F;
    for (shift = 7;; shift += 7) {
        if (LS_UNLIKELY(pos >= end))
            return -1;
        b = p[pos++];
        u |= (b & 0x7F) << shift;
        if (b < 0x80)
            break;
        if (LS_UNLIKELY(shift == 63))
            return -1;
    }
    *out = (int64_t)((u >> 1) ^ (0ull - (u & 1)));
    return pos;
}

#define LS_FAIL(msg) do { e->message = (msg); e->position = start; return -1; } while (0)

/* Parse the record at `pos`, which must end by `end`; 0 or -1 with `e` set. */
LS_INLINE int ls_parse_record(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                              ls_record *r, ls_error *e)
{
    const Py_ssize_t start = pos;
    Py_ssize_t body_end;
    int32_t length, n, i;

    pos = ls_varint(p, pos, end, &length);
    if (LS_UNLIKELY(pos < 0))
        LS_FAIL("record length varint is malformed or truncated");
    if (LS_UNLIKELY(length < 6 || length > end - pos))
        LS_FAIL("record length is out of bounds");
    body_end = pos + length;
    pos += 1;  /* attributes: unused */
    pos = ls_varlong(p, pos, body_end, &r->timestamp_delta);
    if (LS_UNLIKELY(pos < 0))
        LS_FAIL("record timestamp delta is malformed");
    pos = ls_varint(p, pos, body_end, &r->offset_delta);
    if (LS_UNLIKELY(pos < 0))
        LS_FAIL("record offset delta is malformed");
    pos = ls_varint(p, pos, body_end, &n);
    if (LS_UNLIKELY(pos < 0))
        LS_FAIL("record key length is malformed");
    if (n >= 0) {
        if (LS_UNLIKELY(n > body_end - pos))
            LS_FAIL("record key runs past the record");
        r->key_pos = pos;
        r->key_len = n;
        pos += n;
    } else {
        r->key_pos = -1;
        r->key_len = -1;
    }
    pos = ls_varint(p, pos, body_end, &n);
    if (LS_UNLIKELY(pos < 0))
        LS_FAIL("record value length is malformed");
    if (n >= 0) {
        if (LS_UNLIKELY(n > body_end - pos))
            LS_FAIL("record value runs past the record");
        r->value_pos = pos;
        r->value_len = n;
        pos += n;
    } else {
        r->value_pos = -1;
        r->value_len = -1;
    }
    pos = ls_varint(p, pos, body_end, &r->header_count);
    if (LS_UNLIKELY(pos < 0))
        LS_FAIL("record header count is malformed");
    if (LS_UNLIKELY(r->header_count < 0 || r->header_count > body_end - pos))
        LS_FAIL("invalid number of record headers");
    r->headers_pos = pos;
    for (i = 0; i < r->header_count; i++) {
        pos = ls_varint(p, pos, body_end, &n);
        if (LS_UNLIKELY(pos < 0))
            LS_FAIL("header key length is malformed");
        if (LS_UNLIKELY(n < 0 || n > body_end - pos))
            LS_FAIL("invalid header key length");
        pos += n;
        pos = ls_varint(p, pos, body_end, &n);
        if (LS_UNLIKELY(pos < 0))
            LS_FAIL("header value length is malformed");
        if (n >= 0) {
            if (LS_UNLIKELY(n > body_end - pos))
                LS_FAIL("header value runs past the record");
            pos += n;
        }
    }
    if (LS_UNLIKELY(pos != body_end))
        LS_FAIL("invalid record size: fields do not fill the record length");
    r->end = body_end;
    return 0;
}

#undef LS_FAIL

/* Offset deltas must increase and stay within lastOffsetDelta (§10). */
LS_INLINE int ls_check_delta(const ls_record *r, int32_t *prev, int32_t last_delta,
                             Py_ssize_t pos, ls_error *e)
{
    if (LS_UNLIKELY(r->offset_delta <= *prev || r->offset_delta > last_delta)) {
        e->message = "record offset delta is out of order or past lastOffsetDelta";
        e->position = pos;
        return -1;
    }
    *prev = r->offset_delta;
    return 0;
}

/* A malloc'd byte buffer that grows by doubling. */
typedef struct {
    char *data;
    Py_ssize_t size;
    Py_ssize_t capacity;
} ls_growable;

/* Make room for `want` bytes in total; 0, or -1 when out of memory. */
static inline int ls_grow(ls_growable *g, Py_ssize_t want)
{
    Py_ssize_t cap;
    char *grown;
    if (want <= g->capacity)
        return 0;
    cap = g->capacity ? g->capacity * 2 : 4096;
    if (cap < want)
        cap = want;
    grown = (char *)realloc(g->data, cap);
    if (grown == NULL)
        return -1;
    g->data = grown;
    g->capacity = cap;
    return 0;
}

/* One batch's records appended to Arrow-style columns. The caller sizes the
 * fixed-width arrays and `value_data` (records section bound), zeroes the
 * validity bits of the new rows, and commits the running totals only when
 * this returns 0; -1 is a parse error (`e` set), -2 out of memory. */
typedef struct {
    int64_t base_offset, base_ts, max_ts, start_offset, stop;
    int append_time, bounded;
    int32_t count, last_delta;
    int64_t *offsets, *timestamps;
    int32_t *key_offsets, *value_offsets;
    ls_growable *key_data;
    char *value_data;
    unsigned char *key_valid, *value_valid;
    Py_ssize_t n, key_size, value_size, key_nulls, value_nulls, end_position;
} ls_columnar;

__attribute__((noinline)) static int ls_columnar_append(ls_columnar *c, const unsigned char *p, Py_ssize_t pos,
                              Py_ssize_t end, ls_error *e)
{
    ls_record r;
    int32_t i, prev = -1;
    int64_t offset;
    Py_ssize_t n = c->n, key_size = c->key_size, value_size = c->value_size;
    Py_ssize_t key_nulls = c->key_nulls, value_nulls = c->value_nulls;
    int64_t *offsets = c->offsets, *timestamps = c->timestamps;
    int32_t *key_offsets = c->key_offsets, *value_offsets = c->value_offsets;
    char *value_data = c->value_data;
    unsigned char *key_valid = c->key_valid, *value_valid = c->value_valid;
    /* Locals, not c->...: the stores below could alias the struct, which
     * would force a reload of every field on every record. */
    const int64_t base_offset = c->base_offset, base_ts = c->base_ts, max_ts = c->max_ts;
    const int64_t start_offset = c->start_offset, stop = c->stop;
    const int append_time = c->append_time, bounded = c->bounded;
    const int32_t count = c->count, last_delta = c->last_delta;
    ls_growable *key_data = c->key_data;

    for (i = 0; i < count; i++) {
        if (LS_UNLIKELY(ls_parse_record(p, pos, end, &r, e) != 0))
            return -1;
        if (LS_UNLIKELY(ls_check_delta(&r, &prev, last_delta, pos, e) != 0))
            return -1;
        pos = r.end;
        offset = base_offset + r.offset_delta;
        if (offset < start_offset || (bounded && offset >= stop))
            continue;
        offsets[n] = offset;
        timestamps[n] = append_time ? max_ts : base_ts + r.timestamp_delta;
        if (r.key_pos >= 0) {
            if (LS_UNLIKELY(ls_grow(key_data, key_size + r.key_len) != 0))
                return -2;
            memcpy(key_data->data + key_size, p + r.key_pos, r.key_len);
            key_size += r.key_len;
            key_valid[n >> 3] |= (unsigned char)(1u << (n & 7));
        } else {
            key_nulls++;
        }
        if (r.value_pos >= 0) {
            memcpy(value_data + value_size, p + r.value_pos, r.value_len);
            value_size += r.value_len;
            value_valid[n >> 3] |= (unsigned char)(1u << (n & 7));
        } else {
            value_nulls++;
        }
        n++;
        key_offsets[n] = (int32_t)key_size;
        value_offsets[n] = (int32_t)value_size;
    }
    if (LS_UNLIKELY(pos != end)) {
        e->message = "bytes remain after the last record";
        e->position = pos;
        return -1;
    }
    c->n = n;
    c->key_size = key_size;
    c->value_size = value_size;
    c->key_nulls = key_nulls;
    c->value_nulls = value_nulls;
    return 0;
}

#endif
