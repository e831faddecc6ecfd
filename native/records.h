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
#define LS_LIKELY(x) __builtin_expect(!!(x), 1)

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
    /* Timestamp deltas within a batch of a few seconds take two bytes. */
    if (pos < end && p[pos] < 0x80) {
        u |= (uint64_t)p[pos] << 7;
        *out = (int64_t)((u >> 1) ^ (0ull - (u & 1)));
        return pos + 1;
    }
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

/* Kafka's LogValidator over one produced batch's records (Kafka's
 * DefaultRecordBatch iterator and LogValidator.validateRecord): exactly
 * `count` well-formed records filling the section, offset deltas 0, 1, 2, ...
 * (so offsets are dense and lastOffsetDelta, already checked against the
 * count, is the last one), then the rules a record can break on its own: a
 * key in a compacted topic, a CreateTime timestamp within
 * [now - before_max, now + after_max] (NO_TIMESTAMP, -1, is not checked). A
 * broken record stops the walk (-1, `e` and `failed` set); a record breaking
 * a rule does not: every such record is counted, the first LS_MAX_FAULTS
 * kept, as Kafka answers each with its index. */
#define LS_MAX_FAULTS 100
enum { LS_NO_KEY = 1, LS_BAD_TIMESTAMP = 2 };

typedef struct {
    int32_t index;      /* the record's place in its batch: Kafka's batchIndex */
    int32_t kind;       /* LS_NO_KEY or LS_BAD_TIMESTAMP */
    int64_t timestamp;  /* ms */
} ls_fault;

typedef struct {
    int64_t base_ts, now, before_max, after_max;  /* ms; the bounds >= 0 */
    int32_t count;
    int check_timestamps, require_keys;
    int64_t max_ts;     /* out: the largest record timestamp, -1 if none is larger */
    int32_t failed;     /* out: the record a framing error is in, -1 for the section as a whole */
    int32_t faults;     /* out: records that broke a rule */
    ls_fault fault[LS_MAX_FAULTS];
} ls_check;

LS_INLINE int ls_out_of_range(const ls_check *c, int64_t ts)
{
    /* In unsigned arithmetic, so no timestamp overflows the difference. */
    if (ts < c->now)
        return (uint64_t)c->now - (uint64_t)ts > (uint64_t)c->before_max;
    return (uint64_t)ts - (uint64_t)c->now > (uint64_t)c->after_max;
}

__attribute__((unused)) static int ls_check_records(ls_check *c, const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, ls_error *e)
{
    ls_record r;
    int32_t i, kind;
    int64_t ts, max_ts = -1;
    const int64_t base_ts = c->base_ts;
    const int32_t count = c->count;
    const int check_timestamps = c->check_timestamps, require_keys = c->require_keys;

    c->faults = 0;
    for (i = 0; i < count; i++) {
        if (LS_UNLIKELY(pos >= end)) {
            e->message = "Incorrect declared batch size, premature EOF reached";
            e->position = pos;
            goto broken;
        }
        if (LS_UNLIKELY(ls_parse_record(p, pos, end, &r, e) != 0))
            goto broken;
        if (LS_UNLIKELY(r.offset_delta != i)) {
            e->message = "record offset delta is not its index in the batch (inner offsets must be 0, 1, 2, ...)";
            e->position = pos;
            goto broken;
        }
        pos = r.end;
        /* Java's long addition: a delta that overflows wraps, and the bounds then judge the result. */
        ts = (int64_t)((uint64_t)base_ts + (uint64_t)r.timestamp_delta);
        if (ts > max_ts)
            max_ts = ts;
        kind = 0;
        if (require_keys && r.key_pos < 0)
            kind = LS_NO_KEY;
        else if (check_timestamps && ts != -1 && ls_out_of_range(c, ts))
            kind = LS_BAD_TIMESTAMP;
        if (LS_UNLIKELY(kind != 0)) {
            if (c->faults < LS_MAX_FAULTS) {
                c->fault[c->faults].index = i;
                c->fault[c->faults].kind = kind;
                c->fault[c->faults].timestamp = ts;
            }
            c->faults++;
        }
    }
    if (LS_UNLIKELY(pos != end)) {
        e->message = "Incorrect declared batch size, records still remaining in file";
        e->position = pos;
        c->failed = -1;
        return -1;
    }
    c->max_ts = max_ts;
    c->failed = -1;
    return 0;
broken:
    c->failed = i;
    return -1;
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

/* Well-formed UTF-8 (Unicode table 3-7) at `s`, `n` bytes available: the
 * length of the character there, or minus the length of the maximal subpart
 * of an ill-formed sequence (at least 1), the unit one U+FFFD replaces. */
LS_INLINE int ls_utf8_char(const unsigned char *s, Py_ssize_t n)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    int need, k;
    if (c < 0x80)
        return 1;
    if (c < 0xC2)
        return -1;
    if (c < 0xE0) {
        need = 1;
    } else if (c < 0xF0) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;  /* overlong */
        else if (c == 0xED)
            hi = 0x9F;  /* surrogates */
    } else if (c < 0xF5) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;  /* overlong */
        else if (c == 0xF4)
            hi = 0x8F;  /* past U+10FFFF */
    } else {
        return -1;
    }
    for (k = 1; k <= need; k++) {
        if (k >= n || s[k] < lo || s[k] > hi)
            return -k;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

/* Append `n` bytes of a header key to `g` at `size` as valid UTF-8; the new
 * size, or -1 when out of memory. Arrow's string type requires valid UTF-8,
 * so ill-formed input gets U+FFFD per maximal subpart: the same string
 * Python's decode(errors="replace") gives decode_records, and Java's
 * decoder gives Kafka. */
static inline Py_ssize_t ls_utf8_append(ls_growable *g, Py_ssize_t size, const unsigned char *s, int32_t n)
{
    Py_ssize_t i = 0;
    int k;
    while (i < n && s[i] < 0x80)
        i++;
    while (i < n && (k = ls_utf8_char(s + i, n - i)) > 0)
        i += k;
    if (LS_LIKELY(i == n)) {
        if (LS_UNLIKELY(ls_grow(g, size + n) != 0))
            return -1;
        memcpy(g->data + size, s, n);
        return size + n;
    }
    /* A replacement takes 3 bytes for an ill-formed 1: room for the worst. */
    if (ls_grow(g, size + i + 3 * (Py_ssize_t)(n - i)) != 0)
        return -1;
    memcpy(g->data + size, s, i);
    size += i;
    while (i < n) {
        k = ls_utf8_char(s + i, n - i);
        if (k > 0) {
            memcpy(g->data + size, s + i, k);
            size += k;
            i += k;
        } else {
            memcpy(g->data + size, "\xEF\xBF\xBD", 3);
            size += 3;
            i -= k;
        }
    }
    return size;
}

/* memcpy for the short keys and values of most records, inlined: the call
 * into libc and its size dispatch cost as much as moving ~100 bytes. Two
 * overlapping fixed-size moves cover any length in [k, 2k], so nothing is
 * read or written outside [src, src + n) and [dst, dst + n). */
LS_INLINE void ls_copy(char *dst, const unsigned char *src, int32_t n)
{
    if (n >= 32) {
        if (n > 128) {
            memcpy(dst, src, (size_t)n);
        } else if (n > 64) {
            __builtin_memcpy(dst, src, 64);
            __builtin_memcpy(dst + n - 64, src + n - 64, 64);
        } else {
            __builtin_memcpy(dst, src, 32);
            __builtin_memcpy(dst + n - 32, src + n - 32, 32);
        }
    } else if (n >= 8) {
        if (n >= 16) {
            __builtin_memcpy(dst, src, 16);
            __builtin_memcpy(dst + n - 16, src + n - 16, 16);
        } else {
            __builtin_memcpy(dst, src, 8);
            __builtin_memcpy(dst + n - 8, src + n - 8, 8);
        }
    } else if (n >= 4) {
        __builtin_memcpy(dst, src, 4);
        __builtin_memcpy(dst + n - 4, src + n - 4, 4);
    } else if (n > 0) {
        dst[0] = (char)src[0];
        dst[n >> 1] = (char)src[n >> 1];
        dst[n - 1] = (char)src[n - 1];
    }
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

/* The optional columns Spark's Kafka schema adds, under the same contract:
 * `types` (int32 timestampType per row) and `header_lists` (int32 offsets of
 * each row's first header, row n+1 written) are sized by the caller, either
 * may be NULL for a column not asked for; the headers themselves, an Arrow
 * struct<key: string, value: binary> per header, grow here. Validity bits of
 * header values are written one by one, set or cleared, so nothing left over
 * from a rejected batch needs clearing first. */
typedef struct {
    int32_t *types, *header_lists;
    ls_growable *hkey_offsets, *hkey_data, *hvalue_offsets, *hvalue_data, *hvalue_valid;
    Py_ssize_t headers, hkey_size, hvalue_size, hvalue_nulls;
} ls_columnar_extra;

/* Copy the headers of a kept record (already validated by ls_parse_record)
 * into the header columns; 0, -1 (parse error) or -2 (out of memory). */
static inline int ls_columnar_headers(ls_columnar_extra *x, const unsigned char *p, const ls_record *r,
                                      ls_error *e)
{
    Py_ssize_t pos = r->headers_pos, j = x->headers;
    Py_ssize_t key_size = x->hkey_size, value_size = x->hvalue_size;
    const Py_ssize_t last = j + r->header_count, section = r->end - r->headers_pos;
    int32_t i, n, *key_offsets, *value_offsets;
    unsigned char *valid;

    if (LS_UNLIKELY(ls_grow(x->hkey_offsets, 4 * (last + 1)) != 0
                    || ls_grow(x->hvalue_offsets, 4 * (last + 1)) != 0
                    || ls_grow(x->hvalue_valid, (last + 7) >> 3) != 0
                    || ls_grow(x->hvalue_data, value_size + section) != 0))
        return -2;
    key_offsets = (int32_t *)x->hkey_offsets->data;
    value_offsets = (int32_t *)x->hvalue_offsets->data;
    valid = (unsigned char *)x->hvalue_valid->data;
    for (i = 0; i < r->header_count; i++, j++) {
        pos = ls_varint(p, pos, r->end, &n);
        if (LS_UNLIKELY(pos < 0 || n < 0 || n > r->end - pos))
            goto corrupt;
        key_size = ls_utf8_append(x->hkey_data, key_size, p + pos, n);
        if (LS_UNLIKELY(key_size < 0))
            return -2;
        pos += n;
        pos = ls_varint(p, pos, r->end, &n);
        if (LS_UNLIKELY(pos < 0 || n > r->end - pos))
            goto corrupt;
        if (n >= 0) {
            memcpy(x->hvalue_data->data + value_size, p + pos, n);
            value_size += n;
            pos += n;
            valid[j >> 3] |= (unsigned char)(1u << (j & 7));
        } else {
            valid[j >> 3] &= (unsigned char)~(1u << (j & 7));
            x->hvalue_nulls++;
        }
        key_offsets[j + 1] = (int32_t)key_size;
        value_offsets[j + 1] = (int32_t)value_size;
    }
    x->headers = j;
    x->hkey_size = key_size;
    x->hvalue_size = value_size;
    return 0;
corrupt:
    /* Unreachable after ls_parse_record accepted the record; kept so that a
     * future change to either walk fails loudly instead of reading past it. */
    e->message = "record headers are malformed";
    e->position = r->headers_pos;
    return -1;
}

/* The loop; `x` is the constant NULL in ls_columnar_append, so that entry
 * point compiles to the loop without the optional columns. */
LS_INLINE int ls_columnar_loop(ls_columnar *c, ls_columnar_extra *x, const unsigned char *p,
                               Py_ssize_t pos, Py_ssize_t end, ls_error *e)
{
    ls_record r;
    int32_t i, prev = -1;
    int64_t offset;
    int rc;
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
    /* The key buffer and the validity byte being filled live in registers too: a store through a char
     * pointer may alias anything, so `key_data->data` would be reloaded after every copy, and a bit
     * OR'ed into memory chains each row to the last through the store. A byte is written when full
     * and at the end; the caller has zeroed the bits from row n on. */
    char *key_bytes = key_data->data;
    Py_ssize_t key_capacity = key_data->capacity;
    unsigned key_bits = (n & 7) ? key_valid[n >> 3] : 0, value_bits = (n & 7) ? value_valid[n >> 3] : 0;
    unsigned bit;
    int32_t *const types = x ? x->types : NULL;
    int32_t *const header_lists = x ? x->header_lists : NULL;

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
        bit = 1u << (n & 7);
        if (r.key_pos >= 0) {
            if (LS_UNLIKELY(key_size + r.key_len > key_capacity)) {
                if (ls_grow(key_data, key_size + r.key_len) != 0)
                    return -2;
                key_bytes = key_data->data;
                key_capacity = key_data->capacity;
            }
            ls_copy(key_bytes + key_size, p + r.key_pos, r.key_len);
            key_size += r.key_len;
            key_bits |= bit;
        } else {
            key_nulls++;
        }
        if (r.value_pos >= 0) {
            ls_copy(value_data + value_size, p + r.value_pos, r.value_len);
            value_size += r.value_len;
            value_bits |= bit;
        } else {
            value_nulls++;
        }
        if (x != NULL) {
            if (types != NULL)
                types[n] = append_time;
            if (header_lists != NULL) {
                if (r.header_count > 0 && (rc = ls_columnar_headers(x, p, &r, e)) != 0)
                    return rc;
                header_lists[n + 1] = (int32_t)x->headers;
            }
        }
        n++;
        key_offsets[n] = (int32_t)key_size;
        value_offsets[n] = (int32_t)value_size;
        if ((n & 7) == 0) {
            key_valid[(n - 1) >> 3] = (unsigned char)key_bits;
            value_valid[(n - 1) >> 3] = (unsigned char)value_bits;
            key_bits = value_bits = 0;
        }
    }
    if (n & 7) {
        key_valid[n >> 3] = (unsigned char)key_bits;
        value_valid[n >> 3] = (unsigned char)value_bits;
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

__attribute__((noinline)) static int ls_columnar_append(ls_columnar *c, const unsigned char *p,
                                                        Py_ssize_t pos, Py_ssize_t end, ls_error *e)
{
    return ls_columnar_loop(c, NULL, p, pos, end, e);
}

/* ls_columnar_append plus the columns `x` asks for; `x`'s totals, like
 * `c`'s, are for the caller to commit when this returns 0. */
__attribute__((noinline)) static int ls_columnar_append_extra(ls_columnar *c, ls_columnar_extra *x,
                                                              const unsigned char *p, Py_ssize_t pos,
                                                              Py_ssize_t end, ls_error *e)
{
    return ls_columnar_loop(c, x, p, pos, end, e);
}

#endif
