/* Contents of the backdoor RAMs (hdl/common/ram.v) in files the simulator maps.
 *
 * A RAM named NAME lives in the file named by the environment variable
 * TRAININGCXL_RAM_<NAME>, from the byte TRAININGCXL_RAM_<NAME>_OFFSET on (a
 * multiple of the page size; 0 if unset), one word every ``stride`` bytes (the
 * word's bytes rounded up to a power of two), little-endian; the test bench
 * maps the same file (sim/backdoor.py), so both see every write at once.
 * Without the variable the RAM is anonymous memory. A file the runner creates
 * starts empty, so at zero, and pages are only backed once written; a media
 * file (``train --pmem``) keeps what an earlier run left in it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svdpi.h"

extern "C" {

#define MAX_RAMS 16
#define WORD_BYTES 64   /* the DPI calls move 512-bit words */

struct ram {
    uint8_t *base;
    uint64_t depth;
    uint32_t bytes, stride;
};

static struct ram rams[MAX_RAMS];
static int n_rams;

static void fail(const char *what, const char *name) {
    fprintf(stderr, "tcxl_ram %s: %s: %s\n", name, what, strerror(errno));
    exit(2);
}

static uint32_t stride_of(uint32_t bytes) {
    uint32_t s = 1;
    while (s < bytes) s <<= 1;
    return s;
}

int tcxl_ram_open(const char *name, long long depth, int bytes) {
    if (n_rams == MAX_RAMS) { errno = ENOSPC; fail("too many backdoor RAMs", name); }
    struct ram *r = &rams[n_rams];
    r->depth = (uint64_t)depth;
    r->bytes = (uint32_t)bytes;
    r->stride = stride_of(r->bytes);
    size_t size = (size_t)r->depth * r->stride;
    char var[128];
    snprintf(var, sizeof var, "TRAININGCXL_RAM_%s", name);
    const char *path = getenv(var);
    if (path && *path) {
        snprintf(var, sizeof var, "TRAININGCXL_RAM_%s_OFFSET", name);
        const char *at = getenv(var);
        off_t offset = at ? (off_t)strtoll(at, NULL, 10) : 0;
        int fd = open(path, O_RDWR | O_CREAT, 0600);
        if (fd < 0) fail("cannot open its file", path);
        struct stat st;
        if (fstat(fd, &st) != 0) fail("cannot stat its file", path);
        if ((size_t)st.st_size < (size_t)offset + size &&
            ftruncate(fd, offset + (off_t)size) != 0)
            fail("cannot size its file", path);
        r->base = (uint8_t *)mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offset);
        close(fd);
    } else {
        r->base = (uint8_t *)mmap(NULL, size, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if ((void *)r->base == MAP_FAILED) fail("cannot map its words", name);
    return n_rams++;
}

void tcxl_ram_read(int handle, long long addr, svBitVecVal *data) {
    struct ram *r = &rams[handle];
    memset(data, 0, WORD_BYTES);
    if ((uint64_t)addr < r->depth)
        memcpy(data, r->base + (uint64_t)addr * r->stride, r->bytes);
}

void tcxl_ram_write(int handle, long long addr, const svBitVecVal *data,
                    const svBitVecVal *mask) {
    struct ram *r = &rams[handle];
    if ((uint64_t)addr >= r->depth) return;
    uint8_t *word = r->base + (uint64_t)addr * r->stride;
    const uint8_t *d = (const uint8_t *)data, *m = (const uint8_t *)mask;
    for (uint32_t k = 0; k < r->bytes; k++)
        word[k] = (uint8_t)((word[k] & ~m[k]) | (d[k] & m[k]));
}

}  // extern "C"
