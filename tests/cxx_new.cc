// C++ allocation through hakmem: every form of operator new and delete
// (plain, array, nothrow, sized, aligned), the failure contracts (bad_alloc,
// nullptr, the new_handler), and standard containers across threads.
// Normal build only: the test links libhakmem.so, which must provide the
// operators itself.
#include "hak_test.h"

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

// Every pointer from operator new must be a live hakmem block covering the
// request; writing it whole checks the size is really there.
static void check_hakmem_block(void *p, size_t size, size_t align)
{
    CHECK(p != nullptr);
    CHECK_ALIGNED(p, align);
    size_t usable = hak_malloc_usable_size(p);
    CHECKF(usable >= size, "usable size %zu of a %zu-byte new", usable, size);
    CHECK_EQ_SIZE(malloc_usable_size(p), usable);
    hak_fill(p, size, hak_seed_of(p, size));
    CHECK_PATTERN(p, size, hak_seed_of(p, size));
}

static void operators_resolve_to_hakmem()
{
    // new, new[], delete, delete[], and their aligned forms: the ones every
    // C++ program calls. The remaining forms may fall back to libstdc++,
    // which forwards to these, so they are only listed.
    static const char *const required[] = {
        "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv",
        "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t", "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
    };
    static const char *const listed[] = {
        "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZdlPvm", "_ZdaPvm",
        "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
    };
    for (const char *sym : required) {
        const char *obj = hak_symbol_object(sym);
#ifdef HAK_TEST_STANDARD_NAMES
        CHECKF(obj && strstr(obj, "libhakmem"), "%s resolves to %s", sym, obj ? obj : "(nothing)");
#else
        CHECK(obj != nullptr);
#endif
    }
    for (const char *sym : listed) {
        const char *obj = hak_symbol_object(sym);
        printf("     %-36s from %s\n", sym, obj ? obj : "(nothing)");
    }
}

static void plain_and_array_new()
{
    for (size_t n = 1; n <= 1 << 20; n = n * 3 + 1) {
        char *p = new char[n];
        check_hakmem_block(p, n, n >= 16 ? 16 : 1);
        delete[] p;
        void *q = ::operator new(n);
        check_hakmem_block(q, n, n >= 16 ? 16 : 1);
        ::operator delete(q);
    }
    long *one = new long(42);
    check_hakmem_block(one, sizeof *one, alignof(long));
    delete one;
}

// Array new of a type with a destructor carries a hidden element count in
// front of the elements: the pointer delete[] receives is not the one the
// array's first element has.
struct Counted {
    static int alive;
    uint64_t payload[3];
    Counted() { alive++; payload[0] = payload[1] = payload[2] = 0xC0FFEE; }
    ~Counted() { CHECK(payload[1] == 0xC0FFEE); alive--; }
};
int Counted::alive = 0;

static void array_of_objects_with_destructors()
{
    for (size_t n : {1, 7, 100, 5000}) {
        Counted *a = new Counted[n];
        CHECK((size_t)Counted::alive == n);
        delete[] a;
        CHECK(Counted::alive == 0);
    }
}

static void nothrow_forms()
{
    void *p = ::operator new(100, std::nothrow);
    check_hakmem_block(p, 100, 16);
    ::operator delete(p, std::nothrow);
    p = ::operator new[](5000, std::nothrow);
    check_hakmem_block(p, 5000, 16);
    ::operator delete[](p, std::nothrow);
    int *i = new (std::nothrow) int[64];
    check_hakmem_block(i, 64 * sizeof(int), alignof(int));
    delete[] i;
}

static void sized_delete()
{
    for (size_t n : {1, 8, 24, 100, 4096, 70000, 3 << 20}) {
        void *p = ::operator new(n);
        check_hakmem_block(p, n, n >= 16 ? 16 : 1);
        ::operator delete(p, n);
        p = ::operator new[](n);
        check_hakmem_block(p, n, n >= 16 ? 16 : 1);
        ::operator delete[](p, n);
    }
    // the compiler's own sized delete (-fsized-deallocation) on a new-expression
    struct Odd { char c[37]; };
    Odd *o = new Odd();
    check_hakmem_block(o, sizeof *o, 1);
    delete o;
}

struct alignas(64) CacheLine { char bytes[64]; };
struct alignas(4096) Page { char bytes[4096]; };

static void aligned_new_expressions()
{
    CacheLine *c = new CacheLine();
    check_hakmem_block(c, sizeof *c, 64);
    delete c;
    CacheLine *cs = new CacheLine[33];
    check_hakmem_block(cs, 33 * sizeof *cs, 64);
    delete[] cs;
    Page *pg = new Page();
    check_hakmem_block(pg, sizeof *pg, 4096);
    delete pg;
    Page *pgs = new Page[5];
    check_hakmem_block(pgs, 5 * sizeof *pgs, 4096);
    delete[] pgs;
    Page *nt = new (std::nothrow) Page();
    check_hakmem_block(nt, sizeof *nt, 4096);
    delete nt;
}

// Every aligned operator, called explicitly, for alignments up to 2 MiB.
static void explicit_align_val_t_calls()
{
    for (size_t align = 16; align <= 2 * MiB; align *= 4) {
        std::align_val_t al{align};
        for (size_t n : {(size_t)1, align - 1, align + 1, (size_t)3000}) {
            void *p = ::operator new(n, al);
            check_hakmem_block(p, n, align);
            ::operator delete(p, al);

            p = ::operator new[](n, al);
            check_hakmem_block(p, n, align);
            ::operator delete[](p, al);

            p = ::operator new(n, al, std::nothrow);
            check_hakmem_block(p, n, align);
            ::operator delete(p, al, std::nothrow);

            p = ::operator new[](n, al, std::nothrow);
            check_hakmem_block(p, n, align);
            ::operator delete[](p, al, std::nothrow);

            p = ::operator new(n, al);
            check_hakmem_block(p, n, align);
            ::operator delete(p, n, al);

            p = ::operator new[](n, al);
            check_hakmem_block(p, n, align);
            ::operator delete[](p, n, al);
        }
    }
}

static void absurd_sizes_throw_or_return_null()
{
    const size_t huge = hak_opaque(SIZE_MAX / 2);
    const std::align_val_t al{64};
    int thrown = 0;
    try { (void)::operator new(huge); } catch (const std::bad_alloc &) { thrown++; }
    try { (void)::operator new[](huge); } catch (const std::bad_alloc &) { thrown++; }
    try { (void)::operator new(huge, al); } catch (const std::bad_alloc &) { thrown++; }
    try { (void)::operator new[](huge, al); } catch (const std::bad_alloc &) { thrown++; }
    try { (void)::operator new(hak_opaque(SIZE_MAX)); } catch (const std::bad_alloc &) { thrown++; }
    CHECKF(thrown == 5, "%d of 5 absurd operator new calls threw std::bad_alloc", thrown);

    CHECK(::operator new(huge, std::nothrow) == nullptr);
    CHECK(::operator new[](huge, std::nothrow) == nullptr);
    CHECK(::operator new(huge, al, std::nothrow) == nullptr);
    CHECK(::operator new[](huge, al, std::nothrow) == nullptr);
}

// [new.delete.single]: a failing operator new calls the installed
// new_handler and retries; with the handler removed it throws bad_alloc.
static int handler_calls = 0;
static void counting_handler()
{
    if (++handler_calls == 2) std::set_new_handler(nullptr);
}

static void new_handler_is_called()
{
    std::set_new_handler(counting_handler);
    bool threw = false;
    try { (void)::operator new(hak_opaque(SIZE_MAX / 2)); } catch (const std::bad_alloc &) { threw = true; }
    std::set_new_handler(nullptr);
    CHECK(threw);
    CHECKF(handler_calls == 2, "new_handler called %d times, want 2", handler_calls);
}

// Containers built on several threads; half of each thread's vectors of
// strings move to a shared queue and are checked and destroyed by another
// thread, so their blocks are freed remotely.
static std::mutex handoff_lock;
static std::deque<std::vector<std::string>> handoff;

static std::string word(uint64_t v) { return "w" + std::to_string(v) + std::string(v % 97, 'x'); }

// The nothrow forms behave as the throwing ones inside try/catch: a
// new_handler that throws bad_alloc makes them return nullptr (issue #7.4).
static int throwing_handler_calls = 0;
static void throwing_handler()
{
    throwing_handler_calls++;
    throw std::bad_alloc();
}

static void nothrow_new_returns_null_when_the_handler_throws()
{
    size_t huge = SIZE_MAX / 2;
    std::align_val_t al{64};
    std::set_new_handler(throwing_handler);
    CHECK(::operator new(huge, std::nothrow) == nullptr);
    CHECK(::operator new[](huge, std::nothrow) == nullptr);
    CHECK(::operator new(huge, al, std::nothrow) == nullptr);
    CHECK(::operator new[](huge, al, std::nothrow) == nullptr);
    bool threw = false;
    try {
        hak_opaque_ptr(::operator new(huge));
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    std::set_new_handler(nullptr);
    CHECK(threw);
    CHECKF(throwing_handler_calls == 5, "handler called %d times, want 5", throwing_handler_calls);
}

static void container_worker(unsigned id, size_t rounds, std::atomic<uint64_t> *checksum)
{
    uint64_t sum = 0;
    for (size_t r = 0; r < rounds; r++) {
        std::map<uint64_t, std::string> m;
        std::vector<std::string> v;
        for (uint64_t i = 0; i < 500; i++) {
            uint64_t k = hak_mix64(id * 1000003 + r * 1009 + i);
            m.emplace(k, word(k));
            v.push_back(word(k));
        }
        for (const auto &kv : m) CHECK(kv.second == word(kv.first));
        for (const auto &s : v) sum += s.size();
        if (r % 2 == 0) {
            std::lock_guard<std::mutex> g(handoff_lock);
            handoff.push_back(std::move(v));
        }
        // and take someone's vector, if any, to check and destroy here
        std::vector<std::string> other;
        {
            std::lock_guard<std::mutex> g(handoff_lock);
            if (!handoff.empty()) {
                other = std::move(handoff.front());
                handoff.pop_front();
            }
        }
        for (const auto &s : other) CHECK(s.size() >= 2 && s[0] == 'w');
    }
    checksum->fetch_add(sum);
}

static void containers_across_threads()
{
    const size_t rounds = hak_scale(40, 1000);
    const unsigned threads = 4;
    // The expected checksum, computed the same way on one thread first.
    uint64_t expected = 0;
    for (unsigned id = 0; id < threads; id++)
        for (size_t r = 0; r < rounds; r++)
            for (uint64_t i = 0; i < 500; i++) expected += word(hak_mix64(id * 1000003 + r * 1009 + i)).size();

    std::atomic<uint64_t> checksum{0};
    std::vector<std::thread> pool;
    for (unsigned id = 0; id < threads; id++) pool.emplace_back(container_worker, id, rounds, &checksum);
    for (auto &t : pool) t.join();
    handoff.clear();
    CHECK(checksum.load() == expected);
}

int main()
{
    hak_test_begin("test_cxx_new");
    RUN_CASE(operators_resolve_to_hakmem);
    RUN_CASE(plain_and_array_new);
    RUN_CASE(array_of_objects_with_destructors);
    RUN_CASE(nothrow_forms);
    RUN_CASE(sized_delete);
    RUN_CASE(aligned_new_expressions);
    RUN_CASE(explicit_align_val_t_calls);
    RUN_CASE(absurd_sizes_throw_or_return_null);
    RUN_CASE(new_handler_is_called);
    RUN_CASE(nothrow_new_returns_null_when_the_handler_throws);
    RUN_CASE(containers_across_threads);
    return 0;
}
