/* No allocator function is a thread cancellation point (POSIX lists the
 * functions that may be; glibc's malloc acts on none). A thread with a
 * cancellation pending (deferred, enabled) makes one allocator call, and
 * must come back from it; the cancellation acts at its next cancellation
 * point. A call that acted on it left the allocator's lock held: the
 * next call that wanted the lock, in any thread, waited for ever.
 *
 * Found by porting glibc's tst-malloc-stats-cancellation (malloc_stats,
 * mallinfo and mallinfo2 wrote or read a file with libc's write and read,
 * both cancellation points, under the report lock) and a cancellation
 * stress (the secure variant's first random numbers in a thread came from
 * libc's getrandom, another one, under the shared heap's lock). Each call
 * is made in a new thread, whose first page carve in a class draws those
 * numbers. */
#include "hak_test.h"

#include <fcntl.h>
#include <malloc.h>

typedef void call_fn(void *block);

static void call_malloc_small(void *b) { free(malloc(48)); (void)b; }
static void call_malloc_medium(void *b) { free(malloc(5000)); (void)b; }
static void call_malloc_large(void *b) { free(malloc(3 * MiB)); (void)b; }
static void call_calloc(void *b) { free(calloc(3, 40)); (void)b; }
static void call_realloc(void *b) { free(realloc(b, 4000)); }
static void call_free(void *b) { free(b); }
static void call_posix_memalign(void *b)
{
    void *p = NULL;
    CHECK(posix_memalign(&p, 64, 100) == 0);
    free(p);
    (void)b;
}
static void call_malloc_usable_size(void *b) { CHECK(malloc_usable_size(b) >= 32); }
static void call_malloc_trim(void *b) { malloc_trim(0); (void)b; }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"   /* (mallinfo: still called by programs) */
static void call_mallinfo(void *b) { struct mallinfo m = mallinfo(); (void)m; (void)b; }
#pragma GCC diagnostic pop
static void call_mallinfo2(void *b) { struct mallinfo2 m = mallinfo2(); (void)m; (void)b; }
static void call_malloc_stats(void *b) { malloc_stats(); (void)b; }

static struct {
    call_fn *fn;
    void *block;              /* allocated by the main thread, for the call */
    volatile bool returned;   /* the call came back */
} the_case;

static void *cancelled_thread(void *arg)
{
    CHECK(pthread_cancel(pthread_self()) == 0);   /* pending from now on */
    the_case.fn(the_case.block);
    the_case.returned = true;
    pthread_testcancel();   /* a cancellation point: it acts here */
    return arg;
}

/* A thread that cancels itself at once, for pthread_cancel's own first
 * call, which loads libgcc_s (allocating), to be behind us. */
static void *exits_cancelled(void *arg)
{
    CHECK(pthread_cancel(pthread_self()) == 0);
    pthread_testcancel();
    return arg;
}

static void run(call_fn *fn, bool takes_block)
{
    the_case.fn = fn;
    the_case.block = takes_block ? malloc(32) : NULL;
    the_case.returned = false;
    void *result = NULL;
    CHECK(pthread_join(hak_thread_start(cancelled_thread, NULL), &result) == 0);
    CHECKF(result == PTHREAD_CANCELED, "the thread was not cancelled (returned %p)", result);
    CHECK(the_case.returned);
    if (!takes_block) return;
    if (fn != call_free && fn != call_realloc) free(the_case.block);
}

static void no_call_acts_on_a_pending_cancellation(void)
{
    void *result = NULL;
    CHECK(pthread_join(hak_thread_start(exits_cancelled, NULL), &result) == 0 && result == PTHREAD_CANCELED);
    int saved_stderr = dup(STDERR_FILENO);   /* (malloc_stats writes its report there) */
    int null = open("/dev/null", O_WRONLY);
    CHECK(saved_stderr >= 0 && null >= 0 && dup2(null, STDERR_FILENO) == STDERR_FILENO);
    alarm(30);   /* a lock left held: the next call waits for ever */
    run(call_malloc_small, false);
    run(call_malloc_medium, false);
    run(call_malloc_large, false);
    run(call_calloc, false);
    run(call_posix_memalign, false);
    run(call_realloc, true);
    run(call_free, true);
    run(call_malloc_usable_size, true);
    run(call_malloc_trim, false);
    run(call_mallinfo, false);
    run(call_mallinfo2, false);
    run(call_malloc_stats, false);
    /* Every lock free again: each call once more, from this thread. */
    call_malloc_stats(NULL);
    call_mallinfo2(NULL);
    call_malloc_trim(NULL);
    for (size_t size = 8; size < 64 * KiB; size += size / 2) free(malloc(size));
    alarm(0);
    CHECK(dup2(saved_stderr, STDERR_FILENO) == STDERR_FILENO);
    close(null);
    close(saved_stderr);
}

int main(void)
{
    hak_test_begin("test_cancellation");
    RUN_CASE(no_call_acts_on_a_pending_cancellation);
    return 0;
}
