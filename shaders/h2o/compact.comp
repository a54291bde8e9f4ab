#version 450
/*
 * Stable gather (the compaction half of an eviction): dst row r = src row idx[r] for
 * r < count, with idx ascending (the kept indices from topk.comp), so order is preserved.
 * MODE 0 copies 32-bit words (f32 rows, fp16 pairs, scores, positions);
 * MODE 1 packs f32 source rows into fp16 pairs (2 floats -> 1 word; an f32 layer output into
 *        an fp16 cache);
 * MODE 2 writes idx[r] + base (the original positions of the kept tokens).
 * Workgroup x takes rows x, x + groups, ...; invocations take words of the row.
 *
 * Specialisation constants: 0 WG (local_size_x), 1 MODE.
 * Bindings: 0 idx (u32), 1 src (u32 words; f32 in MODE 1), 2 dst (u32 words).
 */
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;

layout(set = 0, binding = 0) readonly buffer Idx { uint idx[]; };
layout(set = 0, binding = 1) readonly buffer Src { uint src[]; };
layout(set = 0, binding = 2) writeonly buffer Dst { uint dst[]; };

layout(push_constant) uniform Push {
    uint count;        // rows to write
    uint row_words;    // dst words per row
    uint src_stride;   // src words per row
    uint dst_stride;   // dst words per row
    uint src_off, dst_off, idx_off;   // words
    uint base;         // MODE 2
} p;

void main()
{
    const uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < p.count; r += gl_NumWorkGroups.x) {
        const uint s = idx[p.idx_off + r];
        const uint d = p.dst_off + r * p.dst_stride;
        if (MODE == 2u) {
            if (tid == 0u) dst[d] = s + p.base;
            continue;
        }
        const uint so = p.src_off + s * p.src_stride;
        for (uint w = tid; w < p.row_words; w += gl_WorkGroupSize.x) {
            if (MODE == 1u)
                dst[d + w] = packHalf2x16(vec2(uintBitsToFloat(src[so + 2u * w]), uintBitsToFloat(src[so + 2u * w + 1u])));
            else
                dst[d + w] = src[so + w];
        }
    }
}
