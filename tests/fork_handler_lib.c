/* A library with a fork handler of its own, as many have (a logger, a
 * connection pool): registered from its constructor, before any
 * allocation, its prepare handler takes the library's lock, which the
 * library's threads hold while they allocate (test_fork_handler_order.c). */
#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;

static void lib_prepare(void) { pthread_mutex_lock(&lib_lock); }
static void lib_parent(void) { pthread_mutex_unlock(&lib_lock); }
static void lib_child(void) { pthread_mutex_unlock(&lib_lock); }

__attribute__((constructor)) static void lib_start(void)
{
    if (pthread_atfork(lib_prepare, lib_parent, lib_child) != 0) abort();
}

/* One unit of the library's work: under its lock, a block large enough
 * that the allocator takes a lock of its own for it, its ends written, and
 * freed. */
int fork_handler_lib_work(size_t size)
{
    pthread_mutex_lock(&lib_lock);
    char *p = malloc(size);
    if (p != NULL) p[0] = p[size - 1] = 1;
    int ok = p != NULL && p[0] == 1 && p[size - 1] == 1;
    free(p);
    pthread_mutex_unlock(&lib_lock);
    return ok;
}
