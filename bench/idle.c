/* The do-nothing program: one malloc and free, so the allocator under test
 * initialises, then exit. Its peak RSS under the launcher is that
 * allocator's own footprint, which the runner subtracts from each
 * workload's peak to give the heap RSS. */
#include "common.h"

int main(int argc, char **argv)
{
    args_init(argc, argv);
    args_done();
    void *p = xmalloc(16);
    escape(p);
    free(p);
    return 0;
}
