/*
 * RoPE helpers shared by rope.comp and rmsnorm.comp (included after the including shader has
 * declared `rope_tab` (float[]) and the spec constant ROPE, the rope dimension).
 *
 * Positions: pos0 + row from the push constants, or, with the spec constant POS_FROM_BUF = 1,
 * base + pos0 + row where base is a u32 the device holds (pos_base[pos_word]: the next position
 * of a KV cache layer, so one recorded step replays at the cache's position). A position at or
 * past 2^24 (only a device base can make one: the host checks pos0 + rows) gives NaN rope values
 * instead of a wrapped angle (rope_position).
 *
 * The table holds cos/sin of p * inv_freq[i] for a position split in three bytes
 * p = a + 256 b + 65536 c, computed on the host in double (vkh2o_rope_table_fill):
 *   rope_tab[2 * ((level * 256 + byte) * HALF + i) + {0, 1}] = {cos, sin}(byte * 256^level * f_i)
 * with level 0 scaled by the attention factor. Two complex products give the angle of any
 * p < 2^24 with float rounding only (no large-argument cos/sin on the device, whose accuracy
 * varies between drivers).
 */
#define ROPE_HALF (ROPE / 2u)
#define ROPE_MAX_POSITION 16777216u

/* p = base + off; false when it reaches 2^24 (the table covers three bytes), overflow-safe */
bool rope_position(uint base, uint off, out uint p)
{
    p = base + off;
    return base < ROPE_MAX_POSITION && off < ROPE_MAX_POSITION - base;
}

vec2 rope_entry(uint level, uint b, uint i)
{
    uint e = 2u * ((level * 256u + b) * ROPE_HALF + i);
    return vec2(rope_tab[e], rope_tab[e + 1u]);
}

vec2 cmul(vec2 a, vec2 b)
{
    return vec2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

/* (cos, sin) x attention_factor of position p, frequency i */
vec2 rope_cs(uint p, uint i)
{
    vec2 e0 = rope_entry(0u, p & 255u, i);
    vec2 e1 = rope_entry(1u, (p >> 8u) & 255u, i);
    vec2 e2 = rope_entry(2u, (p >> 16u) & 255u, i);
    return cmul(cmul(e0, e1), e2);
}

/* Source indices of pair i: (2i, 2i+1) interleaved (DeepSeek/Kimi), (i, i + half) otherwise.
 * The rotated pair always goes to (i, i + half). */
uvec2 rope_src(uint i, bool interleave)
{
    return interleave ? uvec2(2u * i, 2u * i + 1u) : uvec2(i, i + ROPE_HALF);
}

vec2 rope_rotate(vec2 x, vec2 cs)
{
    return vec2(x.x * cs.x - x.y * cs.y, x.y * cs.x + x.x * cs.y);
}
