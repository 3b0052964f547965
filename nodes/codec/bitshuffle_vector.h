/* One vector path of the bit un-transposition, written once for both vector
 * widths: bitshuffle_simd.c includes this file once for SSE2 (16-byte
 * vectors) and once for AVX2 (32 bytes). Not a header of its own: the
 * includer defines
 *   VEC, VEC_BYTES, VEC_ATTR        the vector type, its bytes, the function attribute;
 *   PATH(name)                      the name with the path's suffix (name##_sse2);
 *   LOAD, STOREU, LO8/HI8,          unaligned load and store, the in-lane unpacks;
 *   LO16/HI16,
 *   LO32/HI32, AND, OR, XOR, SRLI64,
 *   SLLI64, SET1_64, ZERO,
 *   ALL_ZERO(v)                     whether every bit of v is 0;
 *   STORE2, STORE4, STORE8          store vectors whose lanes hold consecutive
 *                                   output bytes (AVX2 reorders the 16-byte lanes);
 * and optionally
 *   TR8, ROW(k)                     the 8x8 bit transpose of every 64-bit lane of
 *                                   a vector whose byte k holds row ROW(k) of
 *                                   the plane (default: the shift rounds of
 *                                   sl_tr8 with ROW(k) = k; GFNI does it in one
 *                                   instruction on the rows in reverse order);
 * and this file undefines them at its end.
 *
 * A tile is VEC_BYTES groups of 8 elements. For each byte plane j, load
 * VEC_BYTES bytes of each of the plane's 8 rows, transpose bytes with unpacks
 * so that each 64-bit lane holds one group's 8 row bytes, transpose bits
 * inside every 64-bit lane (the three rounds of sl_tr8, bit_transpose.h),
 * then interleave the s planes into elements. A plane whose rows are all 0
 * in the tile (the high byte of u16 counts below 256: most tiles of a
 * 4D-STEM frame) is stored as 0 without the transposes, which are most of
 * the plane's work; the check is seven ORs of rows already loaded. The AND of every row loaded
 * is the tile's part of the ones bitmap (elements with every bit set): the
 * rows are in registers anyway, so it costs one AND per row vector. */

#ifndef TR8
#define TR8 PATH(tr8)
#define ROW(k) (k)
#endif

/* sl_tr8 on every 64-bit lane. */
VEC_ATTR static inline __attribute__((unused)) VEC PATH(tr8)(VEC x) {
  VEC t;
  t = AND(XOR(x, SRLI64(x, 7)), SET1_64(0x00AA00AA00AA00AALL));
  x = XOR(x, XOR(t, SLLI64(t, 7)));
  t = AND(XOR(x, SRLI64(x, 14)), SET1_64(0x0000CCCC0000CCCCLL));
  x = XOR(x, XOR(t, SLLI64(t, 14)));
  t = AND(XOR(x, SRLI64(x, 28)), SET1_64(0x00000000F0F0F0F0LL));
  x = XOR(x, XOR(t, SLLI64(t, 28)));
  return x;
}

/* One byte plane, the tile's groups from g: 8 * VEC_BYTES output bytes (byte
 * j of as many consecutive elements) to dst; *ones &= the plane's rows.
 * rows points at the plane's first row of nb bytes. */
VEC_ATTR static inline void PATH(plane_tile)(const uint8_t *rows, size_t nb, size_t g, uint8_t *dst,
                                             VEC *ones) {
  VEC a0 = LOAD(rows + ROW(0) * nb + g), a1 = LOAD(rows + ROW(1) * nb + g);
  VEC a2 = LOAD(rows + ROW(2) * nb + g), a3 = LOAD(rows + ROW(3) * nb + g);
  VEC a4 = LOAD(rows + ROW(4) * nb + g), a5 = LOAD(rows + ROW(5) * nb + g);
  VEC a6 = LOAD(rows + ROW(6) * nb + g), a7 = LOAD(rows + ROW(7) * nb + g);
  if (ALL_ZERO(OR(OR(OR(a0, a1), OR(a2, a3)), OR(OR(a4, a5), OR(a6, a7))))) {
    for (int i = 0; i < 8; i++) STOREU(dst + i * VEC_BYTES, ZERO());
    *ones = ZERO(); /* no element of the tile has this plane's bits set */
    return;
  }
  *ones = AND(*ones, AND(AND(AND(a0, a1), AND(a2, a3)), AND(AND(a4, a5), AND(a6, a7))));
  VEC b0 = LO8(a0, a1), b1 = HI8(a0, a1), b2 = LO8(a2, a3), b3 = HI8(a2, a3);
  VEC b4 = LO8(a4, a5), b5 = HI8(a4, a5), b6 = LO8(a6, a7), b7 = HI8(a6, a7);
  VEC c0 = LO16(b0, b2), c1 = HI16(b0, b2), c2 = LO16(b1, b3), c3 = HI16(b1, b3);
  VEC c4 = LO16(b4, b6), c5 = HI16(b4, b6), c6 = LO16(b5, b7), c7 = HI16(b5, b7);
  STORE8((VEC *)dst, TR8(LO32(c0, c4)), TR8(HI32(c0, c4)), TR8(LO32(c1, c5)), TR8(HI32(c1, c5)),
         TR8(LO32(c2, c6)), TR8(HI32(c2, c6)), TR8(LO32(c3, c7)), TR8(HI32(c3, c7)));
}

/* Interleaves s planes (plane p at tile + p * stride) of nelem bytes (a
 * multiple of VEC_BYTES) into nelem elements of s bytes at out. s is 2, 4 or 8. */
VEC_ATTR static inline void PATH(interleave)(const uint8_t *tile, size_t stride, size_t nelem, size_t s,
                                             uint8_t *out) {
  for (size_t e = 0; e < nelem; e += VEC_BYTES) {
    const uint8_t *p = tile + e;
    VEC *o = (VEC *)(out + e * s);
    if (s == 2) {
      VEC a = LOAD(p), b = LOAD(p + stride);
      STORE2(o, LO8(a, b), HI8(a, b));
    } else if (s == 4) {
      VEC a = LOAD(p), b = LOAD(p + stride), c = LOAD(p + 2 * stride), d = LOAD(p + 3 * stride);
      VEC ablo = LO8(a, b), abhi = HI8(a, b), cdlo = LO8(c, d), cdhi = HI8(c, d);
      STORE4(o, LO16(ablo, cdlo), HI16(ablo, cdlo), LO16(abhi, cdhi), HI16(abhi, cdhi));
    } else { /* s == 8 */
      VEC p0 = LOAD(p), p1 = LOAD(p + stride), p2 = LOAD(p + 2 * stride), p3 = LOAD(p + 3 * stride);
      VEC p4 = LOAD(p + 4 * stride), p5 = LOAD(p + 5 * stride);
      VEC p6 = LOAD(p + 6 * stride), p7 = LOAD(p + 7 * stride);
      VEC q01l = LO8(p0, p1), q01h = HI8(p0, p1), q23l = LO8(p2, p3), q23h = HI8(p2, p3);
      VEC q45l = LO8(p4, p5), q45h = HI8(p4, p5), q67l = LO8(p6, p7), q67h = HI8(p6, p7);
      /* 32-bit units: bytes 0..3 (r) and 4..7 (t) of elements */
      VEC r0 = LO16(q01l, q23l), r1 = HI16(q01l, q23l), r2 = LO16(q01h, q23h), r3 = HI16(q01h, q23h);
      VEC t0 = LO16(q45l, q67l), t1 = HI16(q45l, q67l), t2 = LO16(q45h, q67h), t3 = HI16(q45h, q67h);
      STORE8(o, LO32(r0, t0), HI32(r0, t0), LO32(r1, t1), HI32(r1, t1), LO32(r2, t2), HI32(r2, t2),
             LO32(r3, t3), HI32(r3, t3));
    }
  }
}

/* The tile of groups [g, g + VEC_BYTES) of a block of nb groups, every plane,
 * into out; its VEC_BYTES bytes of the ones bitmap to ones + g (ones may be NULL). */
VEC_ATTR static inline void PATH(tile)(const uint8_t *in, uint8_t *out, size_t nb, size_t s, size_t g,
                                       uint8_t *ones) {
  VEC all = SET1_64(-1LL);
  if (s == 1) {
    PATH(plane_tile)(in, nb, g, out + 8 * g, &all);
  } else {
    uint8_t tile[8 * 8 * VEC_BYTES] __attribute__((aligned(VEC_BYTES)));
    for (size_t j = 0; j < s; j++)
      PATH(plane_tile)(in + 8 * j * nb, nb, g, tile + 8 * VEC_BYTES * j, &all);
    PATH(interleave)(tile, 8 * VEC_BYTES, 8 * VEC_BYTES, s, out + 8 * g * s);
  }
  if (ones) STOREU(ones + g, all);
}

/* The whole tiles of a block of nb groups; returns the groups done. */
VEC_ATTR static size_t PATH(tiles)(const uint8_t *in, uint8_t *out, size_t nb, size_t s,
                                   uint8_t *ones) {
  size_t g = 0;
  for (; g + VEC_BYTES <= nb; g += VEC_BYTES) PATH(tile)(in, out, nb, s, g, ones);
  return g;
}

#undef VEC
#undef VEC_BYTES
#undef VEC_ATTR
#undef PATH
#undef LOAD
#undef STOREU
#undef LO8
#undef HI8
#undef LO16
#undef HI16
#undef LO32
#undef HI32
#undef AND
#undef OR
#undef ALL_ZERO
#undef ZERO
#undef XOR
#undef SRLI64
#undef SLLI64
#undef SET1_64
#undef STORE2
#undef STORE4
#undef STORE8
#undef TR8
#undef ROW
