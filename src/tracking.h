/* Tools that watch the heap from outside: valgrind's memcheck.
 *
 * By default memcheck replaces every malloc it finds, hakmem's included.
 * Run with --soname-synonyms=somalloc=nouserintercepts, it leaves hakmem
 * (preloaded or linked) in place, and then sees no heap blocks at all
 * unless hakmem describes them. Under valgrind (RUNNING_ON_VALGRIND,
 * decided once at start-up) it does, with client requests: a block handed
 * out is MALLOCLIKE (its usable size: the bytes malloc_usable_size allows;
 * its tag word, which every free reads, defined), a freed block FREELIKE,
 * and every free block stays NOACCESS except while the allocator itself
 * reads or writes its link and tag (under memcheck only: other tools see
 * hakmem as it runs). All of that happens on the generic paths only: tracking
 * sets HAK_OWNER_COUNTED, which sends every malloc and free there (as
 * HAKMEM_STATS does), so the fast paths carry no client request and cost
 * the same when not under valgrind. Without valgrind's headers at build
 * time, tracking is compiled out. */
#ifndef HAKMEM_TRACKING_H
#define HAKMEM_TRACKING_H

extern bool hak_tracking HAK_INTERNAL;   /* running under valgrind */

HAK_INTERNAL bool hak_tracking_init(void);
HAK_INTERNAL void hak_track_handout(void *p, bool zero);        /* p: a block just handed out */
HAK_INTERNAL void hak_track_free(void *p);                      /* p: a block start being freed */
HAK_INTERNAL void hak_track_open(void *b);                      /* a free block's link and tag */
HAK_INTERNAL void hak_track_close(void *b);
HAK_INTERNAL void hak_track_carve(void *first, size_t bytes, bool carved);
HAK_INTERNAL void hak_track_close_list(const hak_page_t *page, hak_block_t *list, const hak_block_t *tail);

#endif
