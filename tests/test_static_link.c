/* Linked with libhakmem.a (the "-lhakmem" use): the executable itself
 * defines malloc & co., and both the program's calls and the C library's
 * internal ones (strdup, stdio buffers) must land in hakmem. */
#include "hak_test.h"

/* The object (shared library or executable) that defines `symbol`. */
static void *defining_object(const char *symbol)
{
    void *addr = dlsym(RTLD_DEFAULT, symbol);
    Dl_info info;
    CHECKF(addr != NULL, "%s does not resolve", symbol);
    CHECK(dladdr(addr, &info) != 0);
    return info.dli_fbase;
}

static void standard_names_defined_by_executable(void)
{
    Dl_info self;
    CHECK(dladdr((void *)hak_malloc, &self) != 0);
    const char *symbols[] = {"malloc", "free", "calloc", "realloc", "posix_memalign", "aligned_alloc",
                             "malloc_usable_size"};
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++)
        CHECKF(defining_object(symbols[i]) == self.dli_fbase,
               "%s is not defined next to hak_malloc in %s", symbols[i], self.dli_fname);
}

static void program_blocks_are_hakmem_blocks(void)
{
    for (size_t size = 1; size <= 4 * MiB; size = size * 5 + 3) {
        void *p = malloc(size);
        CHECK(p != NULL);
        CHECK(hak_malloc_usable_size(p) >= size);
        CHECK_EQ_SIZE(hak_malloc_usable_size(p), malloc_usable_size(p));
        hak_fill(p, size, 11);
        CHECK_PATTERN(p, size, 11);
        hak_free(p); /* the same allocator under either name */
        p = hak_malloc(size);
        CHECK(p != NULL);
        free(p);
    }
}

/* Memory the C library allocates for the program goes through the same
 * malloc, so the program can free it and hakmem knows the blocks. */
static void libc_internal_allocations(void)
{
    char *s = strdup("hakmem static link");
    CHECK(s != NULL);
    CHECK(hak_malloc_usable_size(s) >= strlen(s) + 1);
    free(s);

    char *line = NULL;
    size_t cap = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL);
    CHECK(getline(&line, &cap, f) > 0);
    CHECK(hak_malloc_usable_size(line) >= cap);
    free(line);
    fclose(f);
}

int main(void)
{
    hak_test_begin("test_static_link");
    RUN_CASE(standard_names_defined_by_executable);
    RUN_CASE(program_blocks_are_hakmem_blocks);
    RUN_CASE(libc_internal_allocations);
    return 0;
}
