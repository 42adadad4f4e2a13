/* The host-pmem baseline's CPU kernels, as a tuned single-threaded CPU runs them:
 * deduplication of a batch's (table, row) keys by radix sort, bag pooling, the
 * summing of each distinct row's gradient contributions and the update of the
 * rows. Times are measured by host/model/cpu_costs.py; the memory traffic of the
 * gather and write-back is the media model's, not this file's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sort 64-bit keys (LSD radix, 16 bits a pass); returns the number of distinct keys. */
int64_t dedup(uint64_t *keys, uint64_t *tmp, int64_t n)
{
    static int64_t count[1 << 16];
    uint64_t *src = keys, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, sizeof count);
        for (int64_t i = 0; i < n; i++)
            count[(src[i] >> shift) & 0xffff]++;
        int64_t sum = 0;
        for (int b = 0; b < (1 << 16); b++) {
            int64_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++)
            dst[count[(src[i] >> shift) & 0xffff]++] = src[i];
        uint64_t *t = src; src = dst; dst = t;
    }
    int64_t distinct = n > 0;
    for (int64_t i = 1; i < n; i++)
        distinct += src[i] != src[i - 1];
    return distinct;
}

/* out[bag] = sum of table[indices[k]] for the bag's indices (CSR offsets), dim int32 lanes. */
void pool(const int32_t *table, const uint32_t *indices, const uint32_t *offsets,
          int64_t bags, int64_t dim, int32_t *out)
{
    for (int64_t b = 0; b < bags; b++) {
        int32_t *o = out + b * dim;
        memset(o, 0, dim * sizeof *o);
        for (uint32_t k = offsets[b]; k < offsets[b + 1]; k++) {
            const int32_t *row = table + (int64_t)indices[k] * dim;
            for (int64_t j = 0; j < dim; j++)
                o[j] += row[j];
        }
    }
}

/* acc[slot[k]] += grads[bag_of[k]]: each index's bag gradient into its distinct row. */
void scatter(const int32_t *grads, const uint32_t *bag_of, const uint32_t *slot, int64_t n,
             int64_t dim, int32_t *acc)
{
    for (int64_t k = 0; k < n; k++) {
        const int32_t *g = grads + (int64_t)bag_of[k] * dim;
        int32_t *a = acc + (int64_t)slot[k] * dim;
        for (int64_t j = 0; j < dim; j++)
            a[j] += g[j];
    }
}

/* table[rows[r]] -= acc[r]: the distinct rows updated. */
void apply(int32_t *table, const uint32_t *rows, const int32_t *acc, int64_t n, int64_t dim)
{
    for (int64_t r = 0; r < n; r++) {
        int32_t *t = table + (int64_t)rows[r] * dim;
        const int32_t *a = acc + r * dim;
        for (int64_t j = 0; j < dim; j++)
            t[j] -= a[j];
    }
}
