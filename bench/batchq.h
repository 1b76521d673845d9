/* A bounded queue of batches of blocks under one lock, shared by the
 * workloads that hand blocks from producer threads to consumer threads
 * (mpmc.c, workerpool.c): producers push batches, consumers pop them until
 * every producer has said it is done and the queue is empty. Batches keep
 * the lock a small share of the time. */
#ifndef BENCH_BATCHQ_H
#define BENCH_BATCHQ_H

#include "common.h"

#define BATCH 64
#define BATCHQ_MAX 64 /* batches */

typedef struct {
    int count;
    block_t item[BATCH];
} batch_t;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    batch_t slot[BATCHQ_MAX];
    long head, tail;     /* batches popped / pushed */
    long capacity;       /* batches, at most BATCHQ_MAX */
    int producers_left;
} batchq_t;

static inline void batchq_init(batchq_t *q, long capacity, int producers)
{
    if (capacity < 1 || capacity > BATCHQ_MAX) die("batch queue capacity %ld out of range", capacity);
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    q->head = q->tail = 0;
    q->capacity = capacity;
    q->producers_left = producers;
}

static inline void batchq_push(batchq_t *q, const batch_t *b)
{
    pthread_mutex_lock(&q->lock);
    while (q->tail - q->head == q->capacity) pthread_cond_wait(&q->not_full, &q->lock);
    q->slot[q->tail++ % q->capacity] = *b;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

/* Returns 0 once every producer is done and the queue is empty. */
static inline int batchq_pop(batchq_t *q, batch_t *b)
{
    pthread_mutex_lock(&q->lock);
    while (q->tail == q->head && q->producers_left > 0) pthread_cond_wait(&q->not_empty, &q->lock);
    int got = q->tail != q->head;
    if (got) {
        *b = q->slot[q->head++ % q->capacity];
        pthread_cond_signal(&q->not_full);
    }
    pthread_mutex_unlock(&q->lock);
    return got;
}

/* A consumer: pops batches until every producer is done and the queue is
 * empty, checking and freeing each block. Returns how many it freed. */
static inline long batchq_free_all(batchq_t *q)
{
    batch_t b;
    long freed = 0;
    while (batchq_pop(q, &b))
        for (int i = 0; i < b.count; i++, freed++) block_free(&b.item[i]);
    return freed;
}

static inline void batchq_producer_done(batchq_t *q)
{
    pthread_mutex_lock(&q->lock);
    if (--q->producers_left == 0) pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

#endif
