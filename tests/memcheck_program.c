/* A small program for valgrind's memcheck with hakmem preloaded
 * (memcheck.sh): `clean` uses the heap correctly in every size range,
 * `use-after-free` reads a freed block, `unwritten-word` tests a block's
 * second word it never wrote, `overflow` reads one byte past a
 * block, `read-past-cut` past a large block realloc cut, `leak` leaves
 * five blocks (small, medium, one a page's only block, large, giant)
 * unreferenced, after a thread that used enough memory to start hakmem's
 * purger (whose own thread must not show as a leak). Not linked to hakmem. */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile char sink;
static void *volatile kept;

static void clean(void)
{
    static const size_t sizes[] = {1, 16, 80, 1000, 5000, 100 << 10, 2 << 20, 40 << 20};
    char *blocks[sizeof sizes / sizeof sizes[0]];
    unsigned long sum = 0;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            blocks[i] = malloc(sizes[i]);
            memset(blocks[i], (int)i, sizes[i]);
        }
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            blocks[i] = realloc(blocks[i], sizes[i] * 2);   /* grown: the old bytes are still defined */
            sum += (unsigned char)blocks[i][sizes[i] - 1];
            blocks[i][malloc_usable_size(blocks[i]) - 1] = 1;   /* every usable byte is the program's */
        }
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            blocks[i] = realloc(blocks[i], sizes[i] * 2 / 8 * 5 + 1);   /* cut: large and huge ones in place */
            sum += (unsigned char)blocks[i][sizes[i] - 1];   /* (the cut keeps more than was written) */
            blocks[i][malloc_usable_size(blocks[i]) - 1] = 1;
        }
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) free(blocks[i]);
    }
    int *zeroed = calloc(1000, sizeof *zeroed);
    for (int i = 0; i < 1000; i++) sum += (unsigned long)zeroed[i];
    free(zeroed);
    free(malloc(3 << 20));   /* never written: its free reads nothing the program left undefined */
    void *aligned = aligned_alloc(4096, 10000);
    memset(aligned, 1, 10000);
    free(aligned);
    /* Bytes never written, copied to the start of blocks (a struct's
     * padding, a buffer filled in part, copied whole: legal): hakmem reads
     * a block's second word to tell it live from freed, and must not make
     * memcheck report that read. Small, medium (a ring class) and large. */
    static const size_t copied_sizes[] = {64, 20000, 300000};
    unsigned char part[64];
    memcpy(part, "part", 4);
    for (size_t i = 0; i < sizeof copied_sizes / sizeof copied_sizes[0]; i++) {
        char *p = malloc(copied_sizes[i]);
        memcpy(p, part, sizeof part);
        sum += malloc_usable_size(p) >= copied_sizes[i];
        p = realloc(p, copied_sizes[i] * 2);
        sum += (unsigned char)p[0];
        free(p);
    }
    printf("sum %lu\n", sum);
}

static void *use_memory(void *arg)
{
    for (int i = 0; i < 16; i++) {
        char *p = malloc(1 << 20);
        memset(p, 1, 1 << 20);
        free(p);
    }
    return arg;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "clean";
    if (strcmp(mode, "clean") == 0) {
        clean();
    } else if (strcmp(mode, "use-after-free") == 0) {
        char *p = malloc(64);
        memset(p, 1, 64);
        free(p);
        sink = p[8];
    } else if (strcmp(mode, "unwritten-word") == 0) {
        long *p = malloc(64);   /* its second word, where a free block holds its tag, never written */
        if (p[1] == 42) sink = 1;
        free(p);
    } else if (strcmp(mode, "overflow") == 0) {
        char *p = malloc(80);   /* a class of its own here: the next block is free */
        memset(p, 1, 80);
        sink = p[80];
        free(p);
    } else if (strcmp(mode, "read-past-cut") == 0) {
        char *p = malloc(8 << 20);
        memset(p, 1, 8 << 20);
        p = realloc(p, 5 << 20);   /* cut in place: its last 3 MiB go back */
        sink = p[5 << 20];
        free(p);
    } else if (strcmp(mode, "leak") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, use_memory, NULL);
        pthread_join(t, NULL);
        static const size_t sizes[] = {100, 20000, 300000, 3 << 20};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            kept = malloc(sizes[i]);
            memset(kept, 1, 64);
            kept = NULL;   /* lost */
        }
        void *giant;   /* aligned beyond a segment: a mapping of its own */
        if (posix_memalign(&giant, (size_t)64 << 20, 3000) != 0) return 1;
        kept = giant;
        memset(kept, 1, 64);
        kept = NULL;
    } else {
        fprintf(stderr, "usage: memcheck_program clean|use-after-free|unwritten-word|overflow|read-past-cut|leak\n");
        return 2;
    }
    return 0;
}
