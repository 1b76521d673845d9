// A C++ module that a C program loads with dlopen (test_cxx_dlopen): its
// operator new is hakmem's, and a failing new must throw bad_alloc that the
// module itself catches, although the C++ runtime arrived after hakmem
// started, in the module's private scope (issue #7.5).
#include <cstddef>
#include <cstdint>
#include <new>

extern "C" int module_catches_bad_alloc(size_t size)
{
    try {
        char *volatile p = new char[size];
        delete[] p;
        return 0;
    } catch (const std::bad_alloc &) {
        return 1;
    }
}

extern "C" int module_nothrow_is_null(size_t size)
{
    return ::operator new(size, std::nothrow) == nullptr;
}
