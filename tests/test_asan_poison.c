/* The ASan build (HAKMEM_SANITIZE=address) poisons hakmem's free blocks and
 * the slack past each request (src/tracking.h), so ASan catches overflows
 * and use after free inside hakmem's own heap. Each misuse runs in a child
 * whose stderr must hold ASan's report naming the exact address; the bytes
 * malloc_usable_size hands out are the program's. Built in the ASan build
 * only. */
#include "hak_test.h"
#include <malloc.h>
#include <sanitizer/asan_interface.h>

static char *volatile target;   /* the address ASan must name, announced first */

static void check_asan_report(void (*fn)(void), const char *kind)
{
    hak_child_report r = hak_run_in_child(fn);
    CHECKF(!(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0), "the misuse went unnoticed");
    const char *bad = strstr(r.text, "bad pointer 0x");
    CHECK(bad != NULL);
    unsigned long long address = strtoull(bad + strlen("bad pointer "), NULL, 16);
    char want[128];
    snprintf(want, sizeof want, "AddressSanitizer: %s on address 0x%llx", kind, address);
    CHECKF(strstr(r.text, want) != NULL, "\"%s\" not in ASan's report: %.600s", want, r.text);
}

static void write_into_slack(void)
{
    char *p = malloc(20);   /* a 32-byte block: 12 bytes of slack */
    target = p + 20;
    hak_announce(target);
    target[0] = 1;
}

static void read_after_free(void)
{
    char *p = malloc(64);
    memset(p, 1, 64);
    free(p);
    target = p + 8;
    hak_announce(target);
    printf("%d\n", target[0]);
}

static void read_after_free_of_medium(void)
{
    /* A medium class of several blocks per page (from 256 KiB up a block
     * has its page to itself); the first block keeps the page (a page
     * emptied goes back to its arena unpoisoned). */
    CHECK(malloc(100 * KiB) != NULL);
    char *p = malloc(100 * KiB);
    memset(p, 1, 100 * KiB);
    free(p);
    target = p + 50 * KiB;
    hak_announce(target);
    printf("%d\n", target[0]);
}

static void overflow_into_slack_is_caught(void) { check_asan_report(write_into_slack, "use-after-poison"); }
static void use_after_free_is_caught(void) { check_asan_report(read_after_free, "use-after-poison"); }
static void use_after_free_of_medium_is_caught(void) { check_asan_report(read_after_free_of_medium, "use-after-poison"); }

/* What malloc_usable_size reports may be used, and realloc in place moves
 * the boundary both ways. */
static void usable_bytes_are_the_programs(void)
{
    char *p = malloc(20);
    size_t usable = malloc_usable_size(p);
    CHECK(usable >= 20);
    memset(p, 2, usable);
    p = realloc(p, 24);
    CHECK(p[23] == 2);
    free(p);
}

/* A page whose blocks are all freed goes back to its arena unpoisoned,
 * every byte: its memory may become anything (a thread's heap, mapped
 * straight from the OS once the segment went back), and a block header
 * left poisoned there failed the first write to it. */
static void a_freed_page_leaves_nothing_poisoned(void)
{
    enum { SIZE = 2000, COUNT = 20 };   /* a class nothing else here uses: one page */
    static char *blocks[COUNT];
    for (int i = 0; i < COUNT; i++) blocks[i] = malloc(SIZE);
    for (int i = 0; i < COUNT; i++) free(blocks[i]);
    malloc_trim(0);   /* the emptied page goes back to its arena */
    for (int i = 0; i < COUNT; i++)
        CHECKF(__asan_region_is_poisoned(blocks[i], SIZE) == NULL, "block %d of the freed page still poisoned", i);
}

int main(void)
{
    hak_test_begin("test_asan_poison");
    RUN_CASE(overflow_into_slack_is_caught);
    RUN_CASE(use_after_free_is_caught);
    RUN_CASE(use_after_free_of_medium_is_caught);
    RUN_CASE(usable_bytes_are_the_programs);
    RUN_CASE(a_freed_page_leaves_nothing_poisoned);
    return 0;
}
