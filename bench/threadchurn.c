/* Thread churn: waves of short-lived threads each allocate a batch of blocks,
 * free half of them themselves and hand the other half to one of a few
 * long-lived "survivor" threads, then exit. Survivors check the blocks and
 * keep the most recent ones, freeing older ones. This exercises thread
 * start-up and exit in the allocator (heap creation, abandoned pages) and
 * frees into pages whose owning thread has already gone.
 *
 *   --waves=400 --wave_threads=4 --objects=2000 --survivors=2 --keep=4096
 *   --min=16 --max=1024 --seed=1 */
#include "common.h"

/* A batch of blocks handed to a survivor; allocated by the short-lived
 * thread too, so the batch itself is also freed cross-thread. */
typedef struct batch {
    struct batch *next;
    long count;
    block_t blocks[];
} batch_t;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t ready;
    batch_t *inbox;
    int closed;
    block_t *kept; /* ring of the last `keep` blocks received */
    long kept_next;
} survivor_t;

typedef struct { int wave, index; } churner_t;

static int survivors;
static long objects, keep;
static size_t min_size, max_size;
static uint64_t seed;
static survivor_t *survivor;

static void *churner(void *arg)
{
    churner_t *c = arg;
    rng_t rng = rng_seed(seed, ((uint64_t)c->wave << 16) + (uint64_t)c->index);
    long handed = objects / 2;
    batch_t *batch = xmalloc(sizeof *batch + sizeof(block_t) * (size_t)handed);
    block_t *own = xmalloc(sizeof *own * (size_t)(objects - handed));
    batch->count = handed;
    for (long i = 0; i < objects; i++) {
        block_t *b = i < handed ? &batch->blocks[i] : &own[i - handed];
        block_alloc(b, rng_log_uniform(&rng, min_size, max_size), rng_next(&rng));
    }
    for (long i = 0; i < objects - handed; i++) block_free(&own[i]);
    free(own);

    survivor_t *s = &survivor[(c->wave + c->index) % survivors];
    pthread_mutex_lock(&s->lock);
    batch->next = s->inbox;
    s->inbox = batch;
    pthread_cond_signal(&s->ready);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void *survive(void *arg)
{
    survivor_t *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (!s->inbox && !s->closed) pthread_cond_wait(&s->ready, &s->lock);
        batch_t *batch = s->inbox;
        s->inbox = NULL;
        pthread_mutex_unlock(&s->lock);
        if (!batch) break;
        while (batch) {
            batch_t *next = batch->next;
            for (long i = 0; i < batch->count; i++) {
                block_t *slot = &s->kept[s->kept_next++ % keep];
                if (slot->p) block_free(slot);
                *slot = batch->blocks[i];
                check(slot->p, slot->size, slot->key);
            }
            free(batch);
            batch = next;
        }
    }
    for (long i = 0; i < keep; i++)
        if (s->kept[i].p) block_free(&s->kept[i]);
    free(s->kept);
    return NULL;
}

int main(int argc, char **argv)
{
    args_init(argc, argv);
    int waves = (int)arg_long("waves", 400);
    int wave_threads = (int)arg_long("wave_threads", 4);
    objects = arg_long("objects", 2000);
    survivors = (int)arg_long("survivors", 2);
    keep = arg_long("keep", 4096);
    min_size = (size_t)arg_long("min", 16);
    max_size = (size_t)arg_long("max", 1024);
    seed = (uint64_t)arg_long("seed", 1);
    args_done();

    double start = now_sec();
    survivor = xmalloc(sizeof *survivor * (size_t)survivors);
    pthread_t *survivor_tids = xmalloc(sizeof *survivor_tids * (size_t)survivors);
    for (int i = 0; i < survivors; i++) {
        survivor_t *s = &survivor[i];
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->ready, NULL);
        s->inbox = NULL;
        s->closed = 0;
        s->kept = calloc((size_t)keep, sizeof *s->kept);
        s->kept_next = 0;
        if (!s->kept || pthread_create(&survivor_tids[i], NULL, survive, s)) die("cannot start survivor");
    }

    churner_t *wave = xmalloc(sizeof *wave * (size_t)wave_threads);
    for (int w = 0; w < waves; w++) {
        for (int i = 0; i < wave_threads; i++) wave[i] = (churner_t){ w, i };
        run_threads(wave_threads, churner, wave, sizeof *wave);
    }
    free(wave);

    for (int i = 0; i < survivors; i++) {
        pthread_mutex_lock(&survivor[i].lock);
        survivor[i].closed = 1;
        pthread_cond_signal(&survivor[i].ready);
        pthread_mutex_unlock(&survivor[i].lock);
        pthread_join(survivor_tids[i], NULL);
    }
    free(survivor_tids);
    free(survivor);
    printf("threads=%ld ops=%ld secs=%.3f\n", (long)waves * wave_threads,
           (long)waves * wave_threads * objects, now_sec() - start);
    return 0;
}
