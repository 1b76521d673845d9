/* calloc of blocks of 128 KiB and more takes a large block (alloc.c:
 * HAK_CALLOC_SPAN_MIN), whose memory not resident before reads as zero
 * untouched, so a program that callocs many medium buffers and writes
 * little of each keeps them lazily zero too (1 GiB resident for 2,000
 * buffers of 500 KB when they were blocks of pages, cleared whole).
 * Of those, blocks of 1 MiB up to a segment's capacity, from memory that
 * is not resident: hakmem populates such a block at once only while
 * the program is seen to touch those blocks densely (src/segment.c), so
 *   - a program that callocs big tables and touches little of them keeps
 *     them lazily zero (resident memory is what it touched);
 *   - a program that fills what it callocs gets its blocks resident at
 *     once (one batch of faults instead of two per page when it reads a
 *     page before writing it);
 * and every block reads as zero either way, calloc'd again from memory
 * freed too. The policy is process-wide, so the cases run in this order. */
#include <sys/mman.h>
#include "hak_test.h"

#define BLOCK (8 * MiB)
#define PAGE 4096

/* Share of the block's pages resident now, in percent. */
static unsigned resident_percent(const void *p, size_t size)
{
    static unsigned char vec[BLOCK / PAGE];
    CHECK(mincore((void *)p, size, vec) == 0);
    size_t n = size / PAGE, resident = 0;
    for (size_t i = 0; i < n; i++) resident += vec[i] & 1;
    return (unsigned)(resident * 100 / n);
}

static void check_zero_sampled(const unsigned char *p, size_t size)
{
    for (size_t i = 0; i < size; i += 997) CHECKF(p[i] == 0, "calloc'd byte %zu is %u", i, p[i]);
}

/* 1,000 buffers of 400 KB, 64 bytes written in each: clearing them would
 * make 400 MB resident. (From memory purged first: what the cases before
 * freed holds old bytes for the purge delay, and a calloc taking it then
 * clears it.) */
static void sparse_medium_buffers_stay_lazy(void)
{
    enum { BUFFERS = 1000 };
    size_t size = 400 * 1000;
    static unsigned char *b[BUFFERS];
    malloc_trim(0);
    size_t before = hak_rss_bytes();
    for (int i = 0; i < BUFFERS; i++) {
        b[i] = calloc(1, size);
        CHECK(b[i] != NULL);
        CHECK(hak_first_not(b[i], 64, 0) == SIZE_MAX && b[i][size - 1] == 0);   /* (test_calloc reads them all) */
        memset(b[i], 0x5a, 64);
    }
    size_t grown = hak_rss_bytes() - before;
    printf("     %d sparse %zu-byte buffers: RSS +%zu KiB\n", BUFFERS, size, grown / KiB);
    CHECKF(grown < 32 * MiB, "RSS grew %zu MiB for %d sparsely used buffers", grown / MiB, BUFFERS);
    for (int i = 0; i < BUFFERS; i++) free(b[i]);
}

/* 5 rounds of 40 tables of 4 MiB calloc'd, 64 bytes written in each, and
 * freed: from the second round on they take the memory the round before
 * freed, whose old bytes calloc gives back (zeroed by the OS) rather than
 * writes over, which made it resident whole (200 tables of 8 MB in 8
 * rounds: 943 MiB). */
static void sparse_tables_in_rounds_stay_lazy(void)
{
    enum { ROUNDS = 5, TABLES = 40 };
    size_t size = 4 * MiB;
    static unsigned char *t[TABLES];
    size_t before = hak_rss_bytes(), most = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < TABLES; i++) {
            CHECK((t[i] = calloc(1, size)) != NULL);
            CHECK(hak_first_not(t[i], 64, 0) == SIZE_MAX && t[i][size - 1] == 0);
            memset(t[i], 0x5a, 64);
        }
        size_t now = hak_rss_bytes() - before;
        if (now > most) most = now;
        for (int i = 0; i < TABLES; i++) free(t[i]);
    }
    printf("     %d rounds of %d sparse 4 MiB tables: RSS +%zu KiB at most\n", ROUNDS, TABLES, most / KiB);
    CHECKF(most < 24 * MiB, "RSS grew %zu MiB for rounds of sparsely used tables", most / MiB);
}

/* 12 tables of 8 MiB, a byte touched every 512 KiB: populating them would
 * make 96 MiB resident. */
static void sparse_tables_stay_lazy(void)
{
    enum { TABLES = 12 };
    unsigned char *t[TABLES];
    size_t before = hak_rss_bytes();
    for (int i = 0; i < TABLES; i++) {
        t[i] = calloc(1, BLOCK);
        CHECK(t[i] != NULL);
        for (size_t off = 0; off < BLOCK; off += 512 * KiB) t[i][off] = (unsigned char)(off >> 19);
    }
    size_t grown = hak_rss_bytes() - before;
    printf("     %d sparse 8 MiB tables: RSS +%zu KiB, the last %u%% resident\n", TABLES, grown / KiB,
           resident_percent(t[TABLES - 1], BLOCK));
    CHECKF(grown < 16 * MiB, "RSS grew %zu MiB for %d sparsely used tables", grown / MiB, TABLES);
    for (int i = 0; i < TABLES; i++) free(t[i]);
}

/* Buffers of 2 MiB read then filled whole, all kept (so each comes from
 * memory never touched): after a few, calloc hands them out resident (all
 * but the every-8th one it keeps probing with). */
static void dense_buffers_come_resident(void)
{
    enum { BUFFERS = 40, LATER = 16 };
    size_t size = 2 * MiB;
    unsigned char *b[BUFFERS];
    int resident_at_return = 0;
    for (int i = 0; i < BUFFERS; i++) {
        b[i] = calloc(1, size);
        CHECK(b[i] != NULL);
        if (i >= BUFFERS - LATER && resident_percent(b[i], size) >= 90) resident_at_return++;
        check_zero_sampled(b[i], size);
        memset(b[i], 0x5a, size);
    }
    printf("     of the last %d dense buffers, %d came resident\n", LATER, resident_at_return);
    CHECKF(resident_at_return >= LATER / 2, "only %d of %d buffers came resident", resident_at_return, LATER);
    for (int i = 0; i < BUFFERS; i++) free(b[i]);
}

int main(void)
{
    hak_test_begin("test_calloc_residency");
    RUN_CASE(sparse_tables_in_rounds_stay_lazy);
    RUN_CASE(sparse_tables_stay_lazy);
    RUN_CASE(dense_buffers_come_resident);
    RUN_CASE(sparse_medium_buffers_stay_lazy);
    return 0;
}
