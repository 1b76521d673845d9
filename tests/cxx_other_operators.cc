// Another allocator's nothrow operators new, as tcmalloc, jemalloc and
// mimalloc define them: straight to their own malloc, not through the
// program's operator new. Preloaded after hakmem, they are the next
// definitions of those names; hakmem's nothrow forms, in a program that
// replaced the form they call, must still go through libstdc++'s (which
// calls the program's new), not these (src/alloc.c, cxx_runtime_symbol).
#include <cstdlib>
#include <new>

void *operator new(std::size_t size, const std::nothrow_t &) noexcept { return std::malloc(size ? size : 1); }
void *operator new[](std::size_t size, const std::nothrow_t &) noexcept { return std::malloc(size ? size : 1); }
void *operator new(std::size_t size, std::align_val_t align, const std::nothrow_t &) noexcept {
    return std::aligned_alloc((std::size_t)align, (size + (std::size_t)align - 1) & ~((std::size_t)align - 1));
}
void *operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t &) noexcept {
    return std::aligned_alloc((std::size_t)align, (size + (std::size_t)align - 1) & ~((std::size_t)align - 1));
}
