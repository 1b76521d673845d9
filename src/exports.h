/* Every name hakmem exports besides its hak_* API: the C allocation
 * functions, glibc's and C23's extensions, glibc's __libc_* names for them
 * (some programs and preload tools call those to reach "the" allocator, and
 * free what they get with free), every C++ operator new and delete, and
 * unshare and setns (which must not find hakmem's thread running).
 * Each is an alias of a hak_* function (the same code, not a call through a
 * wrapper). An alias must stand in the file that defines its
 * function, so this one list is grouped by that file, and each file expands
 * its own group at its end: HAK_DEFINE_EXPORTS(HAK_EXPORTS_FREE).
 *
 * Built with HAKMEM_OVERRIDE=0 (the sanitizer builds, the Rust crate),
 * hakmem exports only hak_*, beside the C library's malloc. */
#ifndef HAKMEM_EXPORTS_H
#define HAKMEM_EXPORTS_H

/* X(return type, exported name, parameters, hak_* function) */

/* C++ operator new and delete: a function each (alloc.c, free.c), as
 * each form the C++ runtime defines as a call of another makes that call
 * in a program that replaced an operator (cxx.c). The plain and aligned
 * deletes are free in the default build; the secure variant tells each
 * form from free (secure.h: allocation families). */
#if HAKMEM_SECURE
#define HAK_DELETE                     hak_delete
#define HAK_DELETE_ALIGNED             hak_delete_aligned
#else
#define HAK_DELETE                     hak_free
#define HAK_DELETE_ALIGNED             hak_free
#endif

#define HAK_EXPORTS_ALLOC(X)                                                        \
  X(void *, malloc, (size_t), hak_malloc)                                           \
  X(void *, calloc, (size_t, size_t), hak_calloc)                                   \
  X(void *, realloc, (void *, size_t), hak_realloc)                                 \
  X(void *, reallocarray, (void *, size_t, size_t), hak_reallocarray)               \
  X(int, posix_memalign, (void **, size_t, size_t), hak_posix_memalign)             \
  X(void *, aligned_alloc, (size_t, size_t), hak_aligned_alloc)                     \
  X(void *, memalign, (size_t, size_t), hak_memalign)                               \
  X(void *, valloc, (size_t), hak_valloc)                                           \
  X(void *, pvalloc, (size_t), hak_pvalloc)                                         \
  X(size_t, malloc_usable_size, (void *), hak_malloc_usable_size)                   \
  X(void *, __libc_malloc, (size_t), hak_malloc)                                    \
  X(void *, __libc_calloc, (size_t, size_t), hak_calloc)                            \
  X(void *, __libc_realloc, (void *, size_t), hak_realloc)                          \
  X(void *, __libc_memalign, (size_t, size_t), hak_memalign)                        \
  X(void *, __libc_valloc, (size_t), hak_valloc)                                    \
  X(void *, __libc_pvalloc, (size_t), hak_pvalloc)

/* operator new / new[]: plain, nothrow, aligned, aligned nothrow */
#define HAK_EXPORTS_NEW(X)                                                          \
  X(void *, _Znwm, (size_t), hak_new)                                               \
  X(void *, _Znam, (size_t), hak_new_array)                                         \
  X(void *, _ZnwmRKSt9nothrow_t, (size_t, const void *), hak_new_nothrow)           \
  X(void *, _ZnamRKSt9nothrow_t, (size_t, const void *), hak_new_array_nothrow)     \
  X(void *, _ZnwmSt11align_val_t, (size_t, size_t), hak_new_aligned)                \
  X(void *, _ZnamSt11align_val_t, (size_t, size_t), hak_new_array_aligned)          \
  X(void *, _ZnwmSt11align_val_tRKSt9nothrow_t, (size_t, size_t, const void *), hak_new_aligned_nothrow) \
  X(void *, _ZnamSt11align_val_tRKSt9nothrow_t, (size_t, size_t, const void *), hak_new_array_aligned_nothrow)

#define HAK_EXPORTS_FREE(X)                                                         \
  X(void, free, (void *), hak_free)                                                 \
  X(void, cfree, (void *), hak_free)                                                \
  X(void, __libc_free, (void *), hak_free)                                          \
  X(void, free_sized, (void *, size_t), hak_free_sized)                             \
  X(void, free_aligned_sized, (void *, size_t, size_t), hak_free_aligned_sized)

/* operator delete / delete[]: plain, sized, nothrow, aligned, aligned sized,
 * aligned nothrow */
#define HAK_EXPORTS_DELETE(X)                                                       \
  X(void, _ZdlPv, (void *), HAK_DELETE)                                             \
  X(void, _ZdaPv, (void *), hak_delete_array)                                       \
  X(void, _ZdlPvm, (void *, size_t), hak_delete_sized)                              \
  X(void, _ZdaPvm, (void *, size_t), hak_delete_array_sized)                        \
  X(void, _ZdlPvRKSt9nothrow_t, (void *, const void *), hak_delete_nothrow)         \
  X(void, _ZdaPvRKSt9nothrow_t, (void *, const void *), hak_delete_array_nothrow)   \
  X(void, _ZdlPvSt11align_val_t, (void *, size_t), HAK_DELETE_ALIGNED)              \
  X(void, _ZdaPvSt11align_val_t, (void *, size_t), hak_delete_array_aligned)        \
  X(void, _ZdlPvmSt11align_val_t, (void *, size_t, size_t), hak_delete_aligned_sized) \
  X(void, _ZdaPvmSt11align_val_t, (void *, size_t, size_t), hak_delete_array_aligned_sized) \
  X(void, _ZdlPvSt11align_val_tRKSt9nothrow_t, (void *, size_t, const void *), hak_delete_aligned_nothrow) \
  X(void, _ZdaPvSt11align_val_tRKSt9nothrow_t, (void *, size_t, const void *), hak_delete_array_aligned_nothrow)

/* glibc's registration of fork handlers, which pthread_atfork calls:
 * hakmem's handlers must be registered before any other (init.c). */
#define HAK_EXPORTS_INIT(X)                                                         \
  X(int, __register_atfork, (void (*)(void), void (*)(void), void (*)(void), void *), hak_register_atfork)

#define HAK_EXPORTS_PURGE(X)                                                         \
  X(int, malloc_trim, (size_t), hak_malloc_trim)

/* unshare and setns end the background thread first (purge.c). Weak, as a
 * static program may link the C library's too. */
#define HAK_EXPORTS_NAMESPACES(X)                                                   \
  X(int, unshare, (int), hak_unshare)                                               \
  X(int, setns, (int, int), hak_setns)

#define HAK_EXPORTS_STATS(X)                                                        \
  X(struct mallinfo2, mallinfo2, (void), hak_mallinfo2)                             \
  X(struct mallinfo, mallinfo, (void), hak_mallinfo)                                \
  X(void, malloc_stats, (void), hak_stats_print)

#if !defined(HAKMEM_OVERRIDE) || HAKMEM_OVERRIDE
#define HAK_EXPORT_ALIAS(ret, name, params, target) HAK_EXPORT_ALIAS_(ret, name, params, target, )
#define HAK_EXPORT_ALIAS_(ret, name, params, target, weak) /* (target expanded first: HAK_DELETE ...) */ \
  ret name params __attribute__((alias(#target), visibility("default"), weak));
/* The C++ operators are weak: a program linked to libhakmem.a that
 * replaces one then has its own, as the C++ standard lets it (cxx.c), where
 * a second definition would stop the link. So is __register_atfork: a
 * static program that links glibc's (with fork) has that one. (Which
 * definition the dynamic linker takes does not depend on it.) */
#define HAK_EXPORT_WEAK_ALIAS(ret, name, params, target) HAK_EXPORT_ALIAS_(ret, name, params, target, weak)
/* Each group also names hak_malloc and hak_free (alloc.c, free.c): linked
 * from libhakmem.a, a program that names one standard function (free
 * alone, say, its strings from the C library's strdup) then gets malloc
 * and free with it, and never one allocator's malloc with the other's
 * free. */
#define HAK_DEFINE_EXPORTS(group) \
  _Pragma("GCC diagnostic ignored \"-Wattribute-alias\"") group(HAK_EXPORT_ALIAS) \
  __attribute__((used)) static void *const hak_exports_need_##group[] = { (void *)hak_malloc, (void *)hak_free };
#define HAK_DEFINE_WEAK_EXPORTS(group) \
  _Pragma("GCC diagnostic ignored \"-Wattribute-alias\"") group(HAK_EXPORT_WEAK_ALIAS)
#else
#define HAK_DEFINE_EXPORTS(group)
#define HAK_DEFINE_WEAK_EXPORTS(group)
#endif

#endif
