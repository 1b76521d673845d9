/* Start-up registrations that fail: pthread_key_create (thread exit then
 * cannot give up a heap) and pthread_atfork (fork then holds no allocator
 * lock). This program defines both to fail, so the allocator linked into
 * it (statically) gets errors. Each failure must be reported once on
 * stderr, and allocation, threads and a single-threaded fork still work.
 * The program runs itself with stderr on a pipe, since the allocator
 * initialises before main. */
#include "hak_test.h"

int pthread_key_create(pthread_key_t *key, void (*destructor)(void *))
{
    (void)key;
    (void)destructor;
    return EAGAIN;
}

int pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    (void)prepare;
    (void)parent;
    (void)child;
    return ENOMEM;
}

static void *allocate_and_exit(void *arg)
{
    void *p = malloc(1000);
    CHECK(p != NULL);
    hak_fill(p, 1000, 1);
    return p;   /* freed by main */
}

static int run_degraded(void)
{
    for (int i = 0; i < 16; i++) {
        pthread_t t = hak_thread_start(allocate_and_exit, NULL);
        void *p;
        pthread_join(t, &p);
        CHECK_PATTERN(p, 1000, 1);
        free(p);
    }
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        free(malloc(100));
        _exit(0);
    }
    int status = hak_wait_child(pid, 30);
    CHECK_CHILD_EXITED_0(status);
    return 0;
}

static size_t count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

/* The child: this program again, in its degraded mode. */
static void exec_degraded(void)
{
    execl("/proc/self/exe", "test_init_failures", "degraded", (char *)NULL);
    _exit(127);
}

static void failures_are_reported_once(void)
{
    hak_child_report r = hak_run_in_child(exec_degraded);
    CHECKF(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "degraded run: status 0x%x, stderr:\n%s", r.status, r.text);
    CHECKF(count(r.text, "pthread_key_create failed") == 1, "stderr:\n%s", r.text);
    CHECKF(count(r.text, "pthread_atfork failed") == 1, "stderr:\n%s", r.text);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "degraded") == 0) return run_degraded();
    hak_test_begin("test_init_failures");
    RUN_CASE(failures_are_reported_once);
    return 0;
}
