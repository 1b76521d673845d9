/* Invalid frees are reported in one line and abort the process. Each case
 * runs in a forked child whose stderr the parent reads through a pipe; the
 * child prints the bad pointer first ("bad pointer 0x...") so the parent can
 * check the message names that same address. Normal build only: under the
 * sanitizers such frees are the sanitizer's business. */
#include <sys/resource.h>
#include "hak_test.h"

#include <sys/mman.h>

#define MESSAGE_PREFIX "hakmem: error:"

typedef void (*bad_free_fn)(void);

static void announce(const void *p)
{
    fprintf(stderr, "bad pointer %p\n", p);
}

static void free_stack_pointer(void)
{
    char buffer[256];
    memset(buffer, 1, sizeof buffer);
    void *p = hak_opaque_ptr(buffer + 64); /* hidden from -Wfree-nonheap-object */
    announce(p);
    free(p);
}

static void free_mmap_pointer(void)
{
    size_t len = 4 * MiB;
    char *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(region != MAP_FAILED);
    memset(region, 1, len);
    void *p = region + 2 * MiB + 16; /* looks like a block in a page */
    announce(p);
    free(p);
}

static void double_free_small(void)
{
    void *p = malloc(32);
    CHECK(p != NULL);
    memset(p, 1, 32);
    announce(p);
    free(p);
    free(p);
}

typedef struct {
    char text[8192];
    int status;
} child_report;

/* Runs fn in a child with stderr redirected into a pipe. */
static child_report run_in_child(bad_free_fn fn)
{
    child_report r = {{0}, 0};
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};   /* it aborts on purpose: no core file */
        setrlimit(RLIMIT_CORE, &no_core);
        close(fds[0]);
        CHECK(dup2(fds[1], STDERR_FILENO) == STDERR_FILENO);
        fn();
        fprintf(stderr, "invalid free returned normally\n");
        _exit(0);
    }
    close(fds[1]);
    size_t used = 0;
    ssize_t got;
    while ((got = read(fds[0], r.text + used, sizeof r.text - 1 - used)) > 0) used += (size_t)got;
    close(fds[0]);
    r.status = hak_wait_child(pid, 30);
    for (const char *line = r.text; *line;) {
        int len = (int)strcspn(line, "\n");
        printf("     child stderr: %.*s\n", len, line);
        line += len + (line[len] == '\n');
    }
    return r;
}

static void check_report(const child_report *r, const char *words)
{
    CHECKF(WIFSIGNALED(r->status) && WTERMSIG(r->status) == SIGABRT,
           "child status 0x%x, want death by SIGABRT; stderr: %s", r->status, r->text);
#ifdef HAK_TEST_STANDARD_NAMES
    const char *bad = strstr(r->text, "bad pointer 0x");
    CHECK(bad != NULL);
    unsigned long long want = strtoull(bad + strlen("bad pointer "), NULL, 16);

    const char *msg = strstr(r->text, MESSAGE_PREFIX);
    CHECKF(msg != NULL, "no \"" MESSAGE_PREFIX "\" in stderr: %s", r->text);
    CHECKF(strstr(msg + 1, MESSAGE_PREFIX) == NULL, "more than one message: %s", r->text);
    const char *eol = strchr(msg, '\n');
    CHECKF(eol != NULL, "message not ended by a newline: %s", msg);
    CHECKF(eol[1] == '\0', "more output after the message line: %s", msg);
    size_t len = (size_t)(eol - msg);
    CHECKF(memmem(msg, len, words, strlen(words)) != NULL, "\"%s\" not in: %.*s", words, (int)len, msg);
    const char *hex = memmem(msg, len, "0x", 2);
    CHECKF(hex != NULL, "no address in: %.*s", (int)len, msg);
    unsigned long long named = strtoull(hex, NULL, 16);
    CHECKF(named == want, "message names 0x%llx, the bad pointer is 0x%llx", named, want);
#else
    (void)words; /* other allocators word their messages differently */
#endif
}

static void stack_pointer_is_not_ours(void)
{
    child_report r = run_in_child(free_stack_pointer);
    check_report(&r, "not allocated by hakmem");
}

static void mmap_pointer_is_not_ours(void)
{
    child_report r = run_in_child(free_mmap_pointer);
    check_report(&r, "not allocated by hakmem");
}

static void small_double_free(void)
{
    child_report r = run_in_child(double_free_small);
    check_report(&r, "double free");
}

int main(void)
{
    hak_test_begin("test_invalid_free");
    RUN_CASE(stack_pointer_is_not_ours);
    RUN_CASE(mmap_pointer_is_not_ours);
    RUN_CASE(small_double_free);
    return 0;
}
