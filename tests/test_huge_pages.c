/* Transparent huge pages (src/segment.c): a large block of 2 MiB and more
 * is advised for them (MADV_HUGEPAGE, which the kernel shows as "hg" in
 * the block's VmFlags in /proc/self/smaps, whatever THP mode it runs in),
 * and a page of medium blocks may advise the 2 MiB stretch it begins, only
 * while the program is seen to write most of its blocks of that kind, so
 *   - medium blocks written in their first bytes only never come resident
 *     whole (they did when their pages advised their stretches unjudged:
 *     2,000 blocks of 300 KB, 64 bytes written in each, made 600 MiB
 *     resident);
 *   - medium blocks written whole come in advised stretches, after a few;
 *   - large blocks touched a byte per MiB are never advised (under THP, one
 *     touch would make 2 MiB resident);
 *   - large blocks written whole are, after a few, all but the every-8th
 *     one (kept plain, to see whether use changes);
 *   - a freed large block's memory loses the advice (it may become small
 *     pages), also after realloc cut it;
 *   - with HAKMEM_HUGE_PAGES=0, nothing is ever advised.
 * The policy is process-wide, so the cases run in this order, in a
 * threaded process: the freed blocks of one case are purged (malloc_trim)
 * before the next takes memory that must never have been touched, to be
 * judged. Stretches are advised only in memory never
 * touched, once the program has had 32 MiB committed, and not where the
 * kernel's THP mode is "never": the dense medium case comes first. */
#include "hak_test.h"

#define BLOCK (4 * MiB)   /* holds a whole 2 MiB stretch wherever it starts */

/* Whether the mapping holding p is advised for huge pages. */
static bool advised(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    char line[512];
    bool inside = false, found = false, hg = false;
    while (!found && fgets(line, sizeof line, f) != NULL) {
        unsigned long from, to;
        if (sscanf(line, "%lx-%lx ", &from, &to) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= from && (uintptr_t)p < to;
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            hg = strstr(line, " hg") != NULL;
            found = true;
        }
    }
    fclose(f);
    CHECKF(found, "no mapping holds %p", p);
    return hg;
}

/* The first whole 2 MiB stretch of a block. */
static const char *stretch_of(const char *p)
{
    return (const char *)(((uintptr_t)p + 2 * MiB - 1) & ~(uintptr_t)(2 * MiB - 1));
}

static bool huge_pages_on(void)
{
    const char *v = getenv("HAKMEM_HUGE_PAGES");
    return v == NULL || strcmp(v, "0") != 0;
}

/* Whether the kernel backs advised memory with huge pages at all. */
static bool thp_possible(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == NULL) return false;
    char mode[128] = "";
    bool never = fgets(mode, sizeof mode, f) == NULL || strstr(mode, "[never]") != NULL;
    fclose(f);
    return !never;
}

enum { MEDIUM = 300 * 1000 };   /* a page of its own (blocks of 256 KiB and more) */

/* 200 medium blocks written whole and kept (60 MB, past the 32 MiB from
 * which stretches are advised): the later ones lie in advised stretches. */
static void dense_medium_blocks_come_advised(void)
{
    enum { BLOCKS = 200, LATER = 64 };
    static char *b[BLOCKS];
    int advised_later = 0;
    for (int i = 0; i < BLOCKS; i++) {
        b[i] = malloc(MEDIUM);
        CHECK(b[i] != NULL);
        memset(b[i], 0x5a, MEDIUM);
        if (i >= BLOCKS - LATER && advised(b[i])) advised_later++;
    }
    for (int i = 0; i < BLOCKS; i++) free(b[i]);
    printf("     of the last %d dense medium blocks, %d lie in advised stretches\n", LATER, advised_later);
    if (!huge_pages_on())
        CHECKF(advised_later == 0, "%d medium blocks advised with HAKMEM_HUGE_PAGES=0", advised_later);
    else if (thp_possible())
        CHECKF(advised_later >= LATER / 2, "only %d of %d dense medium blocks advised", advised_later, LATER);
}

/* 2,000 medium blocks (600 MB), 64 bytes written in each: what is resident
 * is about what was touched, a 4 KiB page a block. */
static void sparse_medium_blocks_stay_small(void)
{
    enum { BLOCKS = 2000 };
    static char *b[BLOCKS];
    size_t before = hak_rss_bytes();
    for (int i = 0; i < BLOCKS; i++) {
        b[i] = malloc(MEDIUM);
        CHECK(b[i] != NULL);
        memset(b[i], 0x5a, 64);
    }
    size_t grown = hak_rss_bytes() - before;
    for (int i = 0; i < BLOCKS; i++) free(b[i]);
    malloc_trim(0);   /* (purged now: the large blocks that follow are judged from memory not resident) */
    printf("     %d medium blocks, 64 bytes written in each: RSS +%zu MiB\n", BLOCKS, grown / MiB);
    CHECKF(grown < 64 * MiB, "RSS grew %zu MiB for %d sparsely used medium blocks", grown / MiB, BLOCKS);
}

/* 16 blocks, a byte written per MiB, all kept: none is advised. */
static void sparse_blocks_stay_small(void)
{
    enum { BLOCKS = 16 };
    char *b[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        b[i] = malloc(BLOCK);
        CHECK(b[i] != NULL);
        for (size_t off = 0; off < BLOCK; off += MiB) b[i][off] = 1;
        CHECKF(!advised(stretch_of(b[i])), "sparse block %d was advised for huge pages", i);
    }
    for (int i = 0; i < BLOCKS; i++) free(b[i]);
    malloc_trim(0);   /* (as above: else the dense blocks reuse these, unjudged, if the purger runs late) */
}

/* Blocks written whole and kept (so each comes from memory never touched,
 * which is what the verdicts learn from): after a few, 7 of every 8 come
 * advised; freed, none stays so. */
static void dense_blocks_come_advised(void)
{
    enum { BLOCKS = 32, LATER = 16 };
    char *b[BLOCKS];
    int advised_later = 0;
    for (int i = 0; i < BLOCKS; i++) {
        b[i] = malloc(BLOCK);
        CHECK(b[i] != NULL);
        if (i >= BLOCKS - LATER && advised(stretch_of(b[i]))) advised_later++;
        memset(b[i], 0x5a, BLOCK);
    }
    /* Every other block is first cut by realloc inside its second stretch:
     * the stretch it then holds in part must lose the advice too. */
    for (int i = 0; i < BLOCKS; i++) {
        char *q = i % 2 == 1 ? realloc(b[i], 3 * MiB - 100 * KiB) : b[i];
        CHECK(q != NULL);
        free(q);
        for (const char *s = stretch_of(b[i]); s + 2 * MiB <= b[i] + BLOCK; s += 2 * MiB)
            CHECKF(!advised(s), "block %d, %sfreed, is still advised at +%zu KiB", i, i % 2 == 1 ? "cut, " : "",
                   (size_t)(s - b[i]) / KiB);
    }
    printf("     of the last %d dense blocks, %d came advised for huge pages\n", LATER, advised_later);
    if (huge_pages_on())
        CHECKF(advised_later >= LATER * 3 / 4, "only %d of %d dense blocks were advised", advised_later, LATER);
    else
        CHECKF(advised_later == 0, "%d blocks advised with HAKMEM_HUGE_PAGES=0", advised_later);
}

int main(void)
{
    hak_test_begin("test_huge_pages");
    hak_become_threaded();
    RUN_CASE(dense_medium_blocks_come_advised);
    RUN_CASE(sparse_medium_blocks_stay_small);
    RUN_CASE(sparse_blocks_stay_small);
    RUN_CASE(dense_blocks_come_advised);
    return 0;
}
