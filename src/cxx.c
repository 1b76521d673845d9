/* The C++ operators a program replaced.
 *
 * A C++ program may replace the global operator new and delete. The C++
 * runtime defines every form but four (new, new with align_val_t, and
 * their deletes) as a call of another form (hak_cxx_form_t): new[] calls
 * new, the nothrow new a new inside try/catch, a sized, nothrow or array
 * delete the unsized delete of its kind. So a program that replaces the
 * plain new and delete (with a header of its own, or counts) has every
 * allocation go through them, and sized delete, which compilers call since
 * C++14, reaches its own delete too.
 *
 * hakmem exports every form. In such a program, the forms it did not
 * replace are hakmem's, and each makes the call the runtime's would (to
 * the form as resolved: the program's, or hakmem's, which may call on);
 * otherwise hakmem's sized delete would free a block the program's new
 * made, with its header, or behind its counts. Only the forms that make
 * such a call pay, and only a load and a branch.
 *
 * The forms the program replaced are told by relocations: each form's
 * address, as the dynamic linker bound it (or the linker, in a static link:
 * hakmem's operators are weak, exports.h), against hakmem's own. The
 * relocations are done before any code runs, so the first call knows. One
 * address differs that is not a replacement: a program built without PIE
 * that takes an operator's address in its code gets an entry in its own
 * procedure linkage table to stand for it, and every reference to the name
 * is bound there. The program's symbol for it is then undefined, which
 * dladdr1 tells.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "internal.h"
#include "exports.h"

#if !defined(HAKMEM_OVERRIDE) || HAKMEM_OVERRIDE

typedef void cxx_fn_t(void);

/* The exported names, declared weak so that the compiler cannot bind
 * them to hakmem's own: each reference is resolved as the program's are. */
extern void *_Znwm(size_t) __attribute__((weak));
extern void *_Znam(size_t) __attribute__((weak));
extern void *_ZnwmSt11align_val_t(size_t, size_t) __attribute__((weak));
extern void *_ZnamSt11align_val_t(size_t, size_t) __attribute__((weak));
extern void _ZdlPv(void *) __attribute__((weak));
extern void _ZdaPv(void *) __attribute__((weak));
extern void _ZdlPvSt11align_val_t(void *, size_t) __attribute__((weak));
extern void _ZdaPvSt11align_val_t(void *, size_t) __attribute__((weak));

/* Each form: as the program resolves it, hakmem's own, its name, and the
 * form it calls, as the runtime defines it (a base form: itself). */
static const struct {
  cxx_fn_t *resolved, *ours;
  const char *name;
  hak_cxx_form_t callee;
} forms[HAK_CXX_FORMS] = {
  [HAK_CXX_NEW] = { (cxx_fn_t *)_Znwm, (cxx_fn_t *)hak_new, "_Znwm", HAK_CXX_NEW },
  [HAK_CXX_NEW_ARRAY] = { (cxx_fn_t *)_Znam, (cxx_fn_t *)hak_new_array, "_Znam", HAK_CXX_NEW },
  [HAK_CXX_NEW_ALIGNED] = { (cxx_fn_t *)_ZnwmSt11align_val_t, (cxx_fn_t *)hak_new_aligned, "_ZnwmSt11align_val_t",
                            HAK_CXX_NEW_ALIGNED },
  [HAK_CXX_NEW_ARRAY_ALIGNED] = { (cxx_fn_t *)_ZnamSt11align_val_t, (cxx_fn_t *)hak_new_array_aligned,
                                  "_ZnamSt11align_val_t", HAK_CXX_NEW_ALIGNED },
  [HAK_CXX_DELETE] = { (cxx_fn_t *)_ZdlPv, (cxx_fn_t *)HAK_DELETE, "_ZdlPv", HAK_CXX_DELETE },
  [HAK_CXX_DELETE_ARRAY] = { (cxx_fn_t *)_ZdaPv, (cxx_fn_t *)hak_delete_array, "_ZdaPv", HAK_CXX_DELETE },
  [HAK_CXX_DELETE_ALIGNED] = { (cxx_fn_t *)_ZdlPvSt11align_val_t, (cxx_fn_t *)HAK_DELETE_ALIGNED,
                               "_ZdlPvSt11align_val_t", HAK_CXX_DELETE_ALIGNED },
  [HAK_CXX_DELETE_ARRAY_ALIGNED] = { (cxx_fn_t *)_ZdaPvSt11align_val_t, (cxx_fn_t *)hak_delete_array_aligned,
                                     "_ZdaPvSt11align_val_t", HAK_CXX_DELETE_ALIGNED },
};

/* Whether the program defines `form` itself: bound elsewhere than to
 * hakmem's, and (where the dynamic linker knows the address: not in a
 * static program) either in the object hakmem is linked into (libhakmem.a:
 * the program's definition won over hakmem's weak one, and may be in no
 * dynamic symbol table, as with -static-libstdc++, where no shared object
 * refers to it), or to a symbol of that name, not to a program's linkage
 * table entry. (dladdr may take the loader's lock: only on the first call
 * of a form that calls another.) */
static bool replaced_by_program(hak_cxx_form_t form) {
  if (forms[form].resolved == forms[form].ours) return false;
  Dl_info info, ours;
  const ElfW(Sym) *sym = NULL;
  if (dladdr1((const void *)forms[form].resolved, &info, (void **)&sym, RTLD_DL_SYMENT) == 0) return true;
  if (dladdr((const void *)forms[form].ours, &ours) != 0 && ours.dli_fbase == info.dli_fbase) return true;
  return sym != NULL && sym->st_shndx != SHN_UNDEF && info.dli_sname != NULL &&
         strcmp(info.dli_sname, forms[form].name) == 0;
}

uint8_t hak_cxx_state;       /* HAK_CXX_UNKNOWN until the first call that asks */
static unsigned replaced;    /* bit per form: it, or a form it calls, is the program's */

bool hak_cxx_replaced(hak_cxx_form_t form) {
  if (__atomic_load_n(&hak_cxx_state, __ATOMIC_ACQUIRE) == HAK_CXX_UNKNOWN) {
    /* (Any thread may work it out: each gets the same.) */
    unsigned bits = 0;
    for (unsigned f = 0; f < HAK_CXX_FORMS; f++)
      if ((bits >> forms[f].callee & 1) || replaced_by_program((hak_cxx_form_t)f)) bits |= 1u << f;
    __atomic_store_n(&replaced, bits, __ATOMIC_RELAXED);
    __atomic_store_n(&hak_cxx_state, bits != 0 ? HAK_CXX_SOME_REPLACED : HAK_CXX_ALL_OURS, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&replaced, __ATOMIC_RELAXED) >> form & 1;
}

void *hak_cxx_new(hak_cxx_form_t form, size_t size, size_t align) {
  if (hak_cxx_aligned(form)) return ((void *(*)(size_t, size_t))forms[form].resolved)(size, align);
  return ((void *(*)(size_t))forms[form].resolved)(size);
}

void hak_cxx_delete(hak_cxx_form_t form, void *p, size_t align) {
  if (hak_cxx_aligned(form)) ((void (*)(void *, size_t))forms[form].resolved)(p, align);
  else ((void (*)(void *))forms[form].resolved)(p);
}

#else   /* no exported operators: none replaced (and so none of these is called) */

uint8_t hak_cxx_state = HAK_CXX_ALL_OURS;
bool hak_cxx_replaced(hak_cxx_form_t form) { (void)form; return false; }
void *hak_cxx_new(hak_cxx_form_t form, size_t size, size_t align) { (void)form, (void)size, (void)align; return NULL; }
void hak_cxx_delete(hak_cxx_form_t form, void *p, size_t align) { (void)form, (void)p, (void)align; }

#endif
