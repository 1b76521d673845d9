/* The do-nothing C++ program: idle.c's twin for the workloads whose
 * program loads libstdc++ (sizeddel; redis-server, through the libjemalloc
 * it links). Such a program maps and starts libstdc++ under every
 * allocator, where a C program does only under the allocators that link
 * it themselves (jemalloc and tcmalloc): subtracted from such a workload's
 * peak, idle.c's footprint would count libstdc++ (some 1.4 MiB resident)
 * as heap for the others alone. */
#include "common.h"
#include <new>

int main(int argc, char **argv)
{
    args_init(argc, argv);
    args_done();
    void *p = ::operator new(16);
    escape(p);
    ::operator delete(p);
    return 0;
}
