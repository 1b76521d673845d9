/* A C program (no C++ runtime at start-up) loads a C++ module privately
 * with dlopen; an absurd new inside the module must throw std::bad_alloc
 * that the module catches, and the nothrow form must return NULL. Before
 * the fix the runtime's functions were looked up once at start-up, found
 * missing, and hakmem aborted instead (issue #7.5). */
#include "hak_test.h"

static void *module;

static void module_catches_bad_alloc(void)
{
    int (*catches)(size_t) = (int (*)(size_t))dlsym(module, "module_catches_bad_alloc");
    CHECK(catches != NULL);
    CHECK(catches(SIZE_MAX / 2) == 1);
    CHECK(catches(64) == 0);
    void *p = malloc(64);
    CHECK(hak_malloc_usable_size(p) >= 64);   /* and malloc is hakmem's (links it) */
    free(p);
}

static void module_nothrow_is_null(void)
{
    int (*is_null)(size_t) = (int (*)(size_t))dlsym(module, "module_nothrow_is_null");
    CHECK(is_null != NULL);
    CHECK(is_null(SIZE_MAX / 2) == 1);
}

int main(int argc, char **argv)
{
    hak_test_begin("test_cxx_dlopen");
    CHECKF(argc == 2, "usage: %s path/to/module.so", argv[0]);
    CHECKF(dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD) == NULL, "%s", "libstdc++ loaded before the module");
    module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECKF(module != NULL, "dlopen: %s", dlerror());
    RUN_CASE(module_catches_bad_alloc);
    RUN_CASE(module_nothrow_is_null);
    return 0;
}
