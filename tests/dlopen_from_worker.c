/* hakmem opened with dlopen by a worker thread, in a program not linked to
 * it: its start-up runs off the main thread, which therefore is not marked
 * to retire the purger when it leaves by pthread_exit (src/purge.c,
 * main_thread_known). A purger started anyway kept such a process alive
 * for ever. Each case runs in a child that must exit 0 within the wait:
 *
 * - worker_only: only the worker allocates (64 MiB, then more while it
 *   gives the purger the time it took to start before); then the main
 *   thread leaves.
 * - main_allocates_too: then the main thread allocates through hakmem as
 *   well, so the purger does start (checked), and it leaves. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static const char *library;
static void *(*hak_malloc_fn)(size_t);
static void (*hak_free_fn)(void *);

static void fail(const char *what)
{
    fprintf(stderr, "dlopen_from_worker: FAIL: %s\n", what);
    _exit(1);
}

static int purger_running(void)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL) fail("opendir /proc/self/task");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], name[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (f == NULL) continue;
        if (fgets(name, sizeof name, f) != NULL && strncmp(name, "hakmem-purger", 13) == 0) n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* 64 MiB allocated and freed through hakmem (enough to start its purger),
 * then a 2 MiB block every 10 ms until the purger runs or 500 ms passed. */
static int give_the_purger_its_chance(void)
{
    void *b[64];
    for (int i = 0; i < 64; i++) {
        if ((b[i] = hak_malloc_fn(MiB)) == NULL) fail("malloc");
        memset(b[i], 1, MiB);
    }
    for (int i = 0; i < 64; i++) hak_free_fn(b[i]);
    for (int waited = 0; waited < 500 && !purger_running(); waited += 10) {
        hak_free_fn(hak_malloc_fn(2 * MiB));
        usleep(10 * 1000);
    }
    return purger_running();
}

static void *open_and_allocate(void *arg)
{
    (void)arg;
    void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) fail(dlerror());
    hak_malloc_fn = (void *(*)(size_t))dlsym(h, "malloc");
    hak_free_fn = (void (*)(void *))dlsym(h, "free");
    if (hak_malloc_fn == NULL || hak_free_fn == NULL) fail("dlsym malloc/free");
    give_the_purger_its_chance();
    return NULL;
}

static void leave(int main_allocates)
{
    pthread_t t;
    if (pthread_create(&t, NULL, open_and_allocate, NULL) != 0) fail("pthread_create");
    pthread_join(t, NULL);
    if (main_allocates && !give_the_purger_its_chance()) fail("no purger after the main thread allocated");
    pthread_exit(NULL);
}

/* The child must end, with exit 0, within 20 s. */
static int run_case(const char *name, int main_allocates)
{
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) leave(main_allocates);
    int status = 0;
    for (int waited = 0; waitpid(pid, &status, WNOHANG) == 0; waited += 10) {
        if (waited >= 20000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "dlopen_from_worker: FAIL: %s: the process did not end after its main thread left\n", name);
            return 1;
        }
        usleep(10 * 1000);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "dlopen_from_worker: FAIL: %s: status %#x\n", name, status);
        return 1;
    }
    printf("  %s: ok\n", name);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) fail("usage: dlopen_from_worker path/to/libhakmem.so");
    library = argv[1];
    return run_case("worker_only", 0) | run_case("main_allocates_too", 1);
}
