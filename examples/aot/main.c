/* Calls the MLP block that `fbc examples/aot/mlp.fbir -O3 --target cpu-llvm --emit obj -o build`
 * compiled (build/mlp.o, declared by build/mlp.h) on deterministic inputs and prints a summary
 * of its result. With a file argument it also writes the inputs and the result there, each as
 * little-endian f32 values in parameter order (what fbc's test of this example compares with
 * the reference interpreter). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "mlp.h"

enum { SEQ = 16, HIDDEN = 64, FFN = 256 };

/* x[i] = sin(0.37 i + phase) * scale: small values of both signs, different per input. */
static void fill(float *x, size_t n, float phase, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = sinf(0.37f * (float)i + phase) * scale;
}

static int dump(FILE *f, const float *x, size_t n) {
    return fwrite(x, sizeof *x, n, f) == n ? 0 : -1;
}

int main(int argc, char **argv) {
    static float x[SEQ * HIDDEN], norm[HIDDEN], wg[HIDDEN * FFN], wu[HIDDEN * FFN],
        wd[FFN * HIDDEN], y[SEQ * HIDDEN];
    fill(x, SEQ * HIDDEN, 0.0f, 1.0f);
    fill(norm, HIDDEN, 1.0f, 0.5f);
    fill(wg, HIDDEN * FFN, 2.0f, 0.125f);
    fill(wu, HIDDEN * FFN, 3.0f, 0.125f);
    fill(wd, FFN * HIDDEN, 4.0f, 0.0625f);
    uint32_t status = mlp_block(x, norm, wg, wu, wd, y);
    if (status != FBC_OK) {
        fprintf(stderr, "mlp_block failed: status %u\n", status);
        return 1;
    }
    double sum = 0.0;
    for (size_t i = 0; i < SEQ * HIDDEN; i++) sum += y[i];
    printf("y[0..4] = %.6f %.6f %.6f %.6f, sum %.6f\n", y[0], y[1], y[2], y[3], sum);
    if (argc > 1) {
        FILE *f = fopen(argv[1], "wb");
        if (!f || dump(f, x, SEQ * HIDDEN) || dump(f, norm, HIDDEN) || dump(f, wg, HIDDEN * FFN)
            || dump(f, wu, HIDDEN * FFN) || dump(f, wd, FFN * HIDDEN) || dump(f, y, SEQ * HIDDEN)
            || fclose(f)) {
            perror(argv[1]);
            return 1;
        }
    }
    return 0;
}
