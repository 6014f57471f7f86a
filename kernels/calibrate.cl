// The micro-benchmarks of `fbc calibrate`: reads of buffers and image2d textures in chosen
// orders, and an empty kernel. Every read kernel sums what it reads into one value per
// work-item, which it stores, so that no read can be optimised away; a work-item reads many
// values for each one it writes, and the bandwidths count the reads only.

__constant sampler_t fbc_cal_smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;

// A buffer of `lines` lines of `width4` float4s, read in row order: work-item (x, y) reads
// float4 x of lines y*steps .. y*steps + steps - 1, so consecutive work-items read consecutive
// float4s (coalesced) and each walks down its column. Global size: (width4, lines / steps).
__kernel void fbc_cal_buffer_rows(__global const float4* src, __global float* out, int width4, int steps) {
    int x = get_global_id(0);
    int y = get_global_id(1);
    float4 s = (float4)(0.0f);
    for (int k = 0; k < steps; k++) {
        s += src[(y * steps + k) * width4 + x];
    }
    out[y * width4 + x] = s.x + s.y + s.z + s.w;
}

// The same buffer read in column order: work-item (x, y) reads float4s y*steps .. y*steps +
// steps - 1 of line x, so consecutive work-items read float4s a line (`length4` float4s) apart
// (strided) and each walks along its line. Global size: (lines, length4 / steps).
__kernel void fbc_cal_buffer_columns(__global const float4* src, __global float* out, int length4, int steps) {
    int x = get_global_id(0);
    int y = get_global_id(1);
    float4 s = (float4)(0.0f);
    for (int k = 0; k < steps; k++) {
        s += src[x * length4 + y * steps + k];
    }
    out[y * get_global_size(0) + x] = s.x + s.y + s.z + s.w;
}

// Image reads by footprint: a work-group of bh*bw work-items (1-D, `bw` of them along a row of
// texels) reads, at each of its `steps` steps, one bh x bw footprint of texels whose top-left
// corner is footprint b = group * steps + step of a grid of footprints `step_x` x `step_y`
// texels apart, `across` of them to a row of the grid (`down` = 0: consecutive steps move
// along the row) or to a column (`down` = 1: they move down the column).
//
// With step_x = bw and step_y = bh the footprints tile the image and each texel is read once
// (the bandwidth of an access order: rows, columns or tiles); with steps larger than the
// footprint each footprint stands alone, aligned to a grid of cache blocks (the texture-block
// probe: the time of a footprint is the number of cache blocks it touches, Eq. 1).
__kernel void fbc_cal_image(__read_only image2d_t img, __global float* out, int bw, int step_x, int step_y,
                            int across, int down, int steps) {
    int lid = get_local_id(0);
    int ly = lid / bw;
    int lx = lid - ly * bw;
    int first = get_group_id(0) * steps;
    float4 s = (float4)(0.0f);
    for (int k = 0; k < steps; k++) {
        int b = first + k;
        int major = b / across;
        int minor = b - major * across;
        int cx = down ? major : minor;
        int cy = down ? minor : major;
        s += read_imagef(img, fbc_cal_smp, (int2)(cx * step_x + lx, cy * step_y + ly));
    }
    out[get_global_id(0)] = s.x + s.y + s.z + s.w;
}

// Nothing: the cost of a launch itself.
__kernel void fbc_cal_empty(__global float* out) {
}
