/* Tells whether LD_PRELOAD=libhakmem.so took effect. Not linked to hakmem:
 *   preload_check hakmem   malloc & co. must resolve to libhakmem, and a
 *                          block from malloc is a hakmem block;
 *   preload_check libc     (run without LD_PRELOAD) they must not, which
 *                          shows the first check can fail at all. */
#include "hak_test.h"

static const char *const symbols[] = {"malloc", "free", "calloc", "realloc", "posix_memalign",
                                      "aligned_alloc", "malloc_usable_size"};

static bool from_hakmem(const char *symbol)
{
    const char *obj = hak_symbol_object(symbol);
    CHECKF(obj != NULL, "%s does not resolve", symbol);
    printf("%-20s from %s\n", symbol, obj);
    return strstr(obj, "libhakmem") != NULL;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    bool want_hakmem = strcmp(argv[1], "hakmem") == 0;
    CHECK(want_hakmem || strcmp(argv[1], "libc") == 0);

    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++)
        CHECKF(from_hakmem(symbols[i]) == want_hakmem, "%s: want it from %s", symbols[i], argv[1]);

    size_t (*usable)(const void *) = (size_t(*)(const void *))dlsym(RTLD_DEFAULT, "hak_malloc_usable_size");
    CHECK((usable != NULL) == want_hakmem);
    if (want_hakmem) {
        /* the program's own malloc call lands in hakmem */
        void *p = malloc(hak_opaque(1000));
        CHECK(p != NULL);
        CHECK(usable(p) >= 1000);
        CHECK_EQ_SIZE(usable(p), malloc_usable_size(p));
        free(p);
    }
    printf("ok   malloc is %s's\n", want_hakmem ? "hakmem" : "the C library");
    return 0;
}
