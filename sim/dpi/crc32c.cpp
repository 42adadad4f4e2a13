/* The CRC networks of hdl/checkpoint/crc.v under Verilator: the CRC-32C
 * register (polynomial 0x1EDC6F41, no reflection, no initial value or final
 * XOR; spec/records.py crc_update) after `bytes` bytes of `data`, most
 * significant byte first.
 *
 * Verilator evaluates every network every cycle, and most hold the same
 * inputs for long stretches: each instance remembers its last inputs and
 * answers, and computes (a table lookup per byte) only when they change.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svdpi.h"

extern "C" {

#define MAX_NETWORKS 64
#define WORDS 16        /* the DPI calls pass 512-bit words */

struct network {
    uint32_t state, crc;
    svBitVecVal data[WORDS];
    int valid;
};

static struct network networks[MAX_NETWORKS];
static int n_networks;
static uint32_t table[256];

int tcxl_crc_open(void) {
    if (n_networks == MAX_NETWORKS) {
        fprintf(stderr, "tcxl_crc: more than %d CRC networks\n", MAX_NETWORKS);
        exit(2);
    }
    if (!table[1])
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t c = b << 24;
            for (int i = 0; i < 8; i++) c = (c & 0x80000000u) ? (c << 1) ^ 0x1EDC6F41u : c << 1;
            table[b] = c;
        }
    return n_networks++;
}

int tcxl_crc32c(int handle, int state, const svBitVecVal *data, int bytes) {
    struct network *n = &networks[handle];
    int words = (bytes + 3) / 4;
    if (n->valid && n->state == (uint32_t)state && !memcmp(n->data, data, words * 4))
        return (int)n->crc;
    uint32_t s = (uint32_t)state;
    for (int k = bytes - 1; k >= 0; k--) {
        uint32_t byte = (data[k / 4] >> (8 * (k % 4))) & 0xFFu;
        s = (s << 8) ^ table[((s >> 24) ^ byte) & 0xFFu];
    }
    n->state = (uint32_t)state;
    memcpy(n->data, data, words * 4);
    n->crc = s;
    n->valid = 1;
    return (int)s;
}

}
