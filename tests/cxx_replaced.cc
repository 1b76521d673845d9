// A C++ program that replaces some of the global operators new and delete,
// as memory-tracking code does: with a header before each block that it
// checks and counts. The C++ runtime defines the other forms as calls of
// these (new[] of new, a sized, nothrow or array delete of the plain one),
// so each block the program's new made must come back to its delete, and
// none other, whichever form the compiler calls (src/cxx.c). Built four
// times, by which operators it replaces:
//   CXX_REPLACE_PLAIN    new(size_t) and delete(void *)
//   CXX_REPLACE_ARRAY    new[](size_t) and delete[](void *)
//   CXX_REPLACE_ALIGNED  new(size_t, align_val_t) and delete(void *, align_val_t)
//   CXX_REPLACE_NONE     none, but built without PIE, it takes the plain new's
//                        address in its code (which binds the name to an entry
//                        of its own linkage table): all hakmem's, and new[]'s
//                        blocks are new[]'s for the secure variant's delete[]
// and run linked to each variant's shared and static library, and not linked
// but preloaded (CXX_PRELOADED: it then calls only standard names); the
// first also linked to the static library with libstdc++ linked in too
// (CXX_STATIC_RUNTIME: its operators are then in no dynamic symbol table).
#include "hak_test.h"

#include <new>

#if !defined(CXX_REPLACE_PLAIN) && !defined(CXX_REPLACE_ARRAY) && !defined(CXX_REPLACE_ALIGNED) && \
    !defined(CXX_REPLACE_NONE)
#error "say which operators the program replaces"
#endif

// A replacement's header: a magic word, the size asked, and room to keep
// the block after it 16-byte aligned.
struct header {
    uint64_t magic;
    size_t size;
};
static const uint64_t MAGIC = 0x7265706c61636564;   // "replaced"
// Requests above this make the replacement throw (a new "out of memory").
static const size_t REFUSED = (size_t)1 << 40;

static size_t replaced_news, replaced_deletes, live_bytes;

[[maybe_unused]] static void *tracked_new(size_t size, size_t align)
{
    if (size >= REFUSED) throw std::bad_alloc();
    size_t room = align > sizeof(header) ? align : sizeof(header);
    void *raw = nullptr;
    CHECK(posix_memalign(&raw, align > 16 ? align : 16, room + size) == 0);
    header *h = (header *)((char *)raw + room) - 1;
    h->magic = MAGIC;
    h->size = size;
    replaced_news++;
    live_bytes += size;
    return h + 1;
}

[[maybe_unused]] static void tracked_delete(void *p, size_t align)
{
    if (p == nullptr) return;
    header *h = (header *)p - 1;
    CHECKF(h->magic == MAGIC, "the replaced delete got %p, which the replaced new did not make", p);
    h->magic = 0;
    replaced_deletes++;
    live_bytes -= h->size;
    size_t room = align > sizeof(header) ? align : sizeof(header);
    free((char *)p - room);
}

#if defined(CXX_REPLACE_PLAIN)
void *operator new(std::size_t size) { return tracked_new(size, 0); }
void operator delete(void *p) noexcept { tracked_delete(p, 0); }
#elif defined(CXX_REPLACE_ARRAY)
void *operator new[](std::size_t size) { return tracked_new(size, 0); }
void operator delete[](void *p) noexcept { tracked_delete(p, 0); }
#elif defined(CXX_REPLACE_ALIGNED)
void *operator new(std::size_t size, std::align_val_t align) { return tracked_new(size, (size_t)align); }
void operator delete(void *p, std::align_val_t align) noexcept { tracked_delete(p, (size_t)align); }
#else
// (Taken in a function the compiler cannot see through.)
static void *(*volatile plain_new)(std::size_t);
__attribute__((noinline)) static void take_address() { plain_new = ::operator new; }
#endif

// One form's call: n_new more replaced news and deletes, none left live.
struct counts {
    size_t news = replaced_news, deletes = replaced_deletes;
    void expect(size_t n, const char *what) const
    {
        CHECKF(replaced_news - news == n && replaced_deletes - deletes == n,
               "%s: %zu replaced news and %zu deletes, expected %zu each", what, replaced_news - news,
               replaced_deletes - deletes, n);
        CHECKF(live_bytes == 0, "%s: %zu bytes live", what, live_bytes);
    }
};

// The block is hakmem's own (not behind a replacement's header): its
// usable size is known and covers the request.
static void check_hakmem_block(void *p, size_t size)
{
    CHECK(p != nullptr);
    CHECKF(malloc_usable_size(p) >= size, "usable size %zu of a %zu-byte block", malloc_usable_size(p), size);
    memset(p, 0x5a, size);
}

struct alignas(64) over_aligned {
    char bytes[200];
};

// Each form that calls a replaced one, called as the compiler calls it and
// by name; the blocks written whole.
static void derived_forms_call_the_replacements()
{
#if defined(CXX_REPLACE_PLAIN)
    {
        counts c;
        std::string *s = new std::string(300, 'x');   // new; sized delete (C++14)
        delete s;
        c.expect(2, "new / sized delete of a string and its buffer");
    }
    {
        counts c;
        long *a = new long[100];   // new[] calls new; delete[] calls delete
        memset(a, 1, 100 * sizeof *a);
        delete[] a;
        c.expect(1, "new[] / delete[]");
    }
    {
        counts c;
        void *p = ::operator new[](500);
        ::operator delete[](p, (size_t)500);   // sized delete[] calls delete[]
        p = ::operator new(40, std::nothrow);
        ::operator delete(p, std::nothrow);
        p = ::operator new[](40, std::nothrow);
        ::operator delete[](p, std::nothrow);
        c.expect(3, "the named forms");
    }
#elif defined(CXX_REPLACE_ARRAY)
    {
        counts c;
        void *p = ::operator new[](500, std::nothrow);   // calls new[]
        ::operator delete[](p, (size_t)500);             // calls delete[]
        p = ::operator new[](40);
        ::operator delete[](p, std::nothrow);
        c.expect(2, "the named array forms");
    }
    {
        counts c;
        std::string *s = new std::string[3];   // a cookie: delete[] gets the size, or not
        delete[] s;
        c.expect(1, "new[] / delete[] of strings");
    }
#elif defined(CXX_REPLACE_ALIGNED)
    {
        counts c;
        over_aligned *o = new over_aligned;   // aligned new; sized aligned delete
        CHECK_ALIGNED(o, 64);
        memset(o, 1, sizeof *o);
        delete o;
        over_aligned *a = new over_aligned[5];   // aligned new[] calls aligned new
        CHECK_ALIGNED(a, 64);
        memset(a, 1, 5 * sizeof *a);
        delete[] a;                               // aligned delete[] calls aligned delete
        c.expect(2, "aligned new / delete, new[] / delete[]");
    }
    {
        counts c;
        std::align_val_t al{128};
        void *p = ::operator new(100, al, std::nothrow);
        ::operator delete(p, al, std::nothrow);
        p = ::operator new[](100, al, std::nothrow);
        ::operator delete[](p, (size_t)100, al);
        p = ::operator new[](100, al);
        ::operator delete[](p, al, std::nothrow);
        p = ::operator new(100, al);
        ::operator delete(p, (size_t)100, al);
        c.expect(4, "the named aligned forms");
    }
#else
    take_address();
    void *p = plain_new(100);
    check_hakmem_block(p, 100);
    ::operator delete(p);
#endif
}

// The forms that call no replaced one are hakmem's, and the replacements
// never see their blocks.
static void other_forms_stay_hakmems()
{
    counts c;
#if !defined(CXX_REPLACE_ALIGNED)
    over_aligned *o = new over_aligned;
    CHECK_ALIGNED(o, 64);
    check_hakmem_block(o, sizeof *o);
    delete o;
    std::align_val_t al{256};
    void *p = ::operator new[](1000, al, std::nothrow);
    CHECK_ALIGNED(p, 256);
    check_hakmem_block(p, 1000);
    ::operator delete[](p, (size_t)1000, al);
#endif
#if !defined(CXX_REPLACE_PLAIN)
    void *s = ::operator new(300);
    check_hakmem_block(s, 300);
    ::operator delete(s);
    void *q = ::operator new(77, std::nothrow);
    check_hakmem_block(q, 77);
    ::operator delete(q, (size_t)77);
#endif
#if !defined(CXX_REPLACE_PLAIN) && !defined(CXX_REPLACE_ARRAY)
    long *a = new long[100];   // new[] / sized delete[]
    check_hakmem_block(a, 100 * sizeof *a);
    delete[] a;
    void *r = ::operator new[](50, std::nothrow);
    check_hakmem_block(r, 50);
    ::operator delete[](r, std::nothrow);
#endif
    c.expect(0, "the forms not replaced");
}

// The nothrow forms that call a replaced new return nullptr where it
// throws, as the runtime's own nothrow forms do. (Not with libstdc++
// linked in, CXX_STATIC_RUNTIME: hakmem, in C, catches through the shared
// runtime's own nothrow form, and lets the bad_alloc through without it, as
// the README says.)
static void nothrow_forms_catch_the_replacements_bad_alloc()
{
    counts c;
#if defined(CXX_STATIC_RUNTIME)
    (void)c;
    return;
#elif defined(CXX_REPLACE_PLAIN)
    CHECK(::operator new(REFUSED, std::nothrow) == nullptr);
    CHECK(::operator new[](REFUSED, std::nothrow) == nullptr);
    char *a = new (std::nothrow) char[REFUSED];
    CHECK(a == nullptr);
    bool thrown = false;
    try {
        (void)::operator new[](REFUSED);
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    CHECK(thrown);
#elif defined(CXX_REPLACE_ARRAY)
    CHECK(::operator new[](REFUSED, std::nothrow) == nullptr);
#elif defined(CXX_REPLACE_ALIGNED)
    std::align_val_t al{64};
    CHECK(::operator new(REFUSED, al, std::nothrow) == nullptr);
    CHECK(::operator new[](REFUSED, al, std::nothrow) == nullptr);
#else
    CHECK(::operator new(REFUSED, std::nothrow) == nullptr);   // hakmem's own refusal
#endif
    c.expect(0, "refused requests");
}

// Standard containers, whose allocators call the plain forms and the sized
// deletes: all of it balanced.
static void containers_balance()
{
    counts c;
    hak_exercise_containers();
    CHECKF(live_bytes == 0, "containers: %zu bytes live", live_bytes);
    CHECKF(replaced_news - c.news == replaced_deletes - c.deletes, "containers: %zu news, %zu deletes",
           replaced_news - c.news, replaced_deletes - c.deletes);
}

int main()
{
    hak_test_begin("cxx_replaced");
#ifdef CXX_PRELOADED
    // Not linked to hakmem: it must be there, preloaded.
    CHECK(dlsym(RTLD_DEFAULT, "hak_malloc") != nullptr);
#endif
    RUN_CASE(derived_forms_call_the_replacements);
    RUN_CASE(other_forms_stay_hakmems);
    RUN_CASE(nothrow_forms_catch_the_replacements_bad_alloc);
    RUN_CASE(containers_balance);
    return 0;
}
