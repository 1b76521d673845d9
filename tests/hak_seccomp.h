/* A seccomp filter that makes the OS refuse what hakmem gives back, so that
 * the tests of those refusals (test_purge_failure, test_free_errno) see
 * them every time: madvise(MADV_DONTNEED or MADV_FREE) fails with EINVAL,
 * as on locked memory, and munmap with ENOMEM, as at the map limit (each
 * as asked, hak_refuse); in every thread of the process (the purger's
 * too). Other advice and other calls are left alone. */
#ifndef HAK_SECCOMP_H
#define HAK_SECCOMP_H

#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#if defined(__x86_64__)
#define HAK_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define HAK_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

/* What the filter refuses: madvise's purging advices (EINVAL, as on locked
 * memory), munmap (ENOMEM, as at vm.max_map_count), or both. */
enum { HAK_REFUSE_PURGES = 1, HAK_REFUSE_MUNMAP = 2 };

/* True once the filter is set; else false, with why it could not be. */
static inline bool hak_refuse(unsigned what, const char **why)
{
#if defined(HAK_AUDIT_ARCH) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* ~0: no call has it */
    unsigned refused_munmap = what & HAK_REFUSE_MUNMAP ? SYS_munmap : ~0u;
    unsigned refused_madvise = what & HAK_REFUSE_PURGES ? SYS_madvise : ~0u;
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, HAK_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refused_munmap, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOMEM),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refused_madvise, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* the advice: the low half of the third argument (little-endian) */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_DONTNEED, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, MADV_FREE, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
    };
    struct sock_fprog prog = { sizeof code / sizeof code[0], code };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        *why = "prctl(PR_SET_NO_NEW_PRIVS) refused";
        return false;
    }
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0) {
        *why = "seccomp filter not permitted here";
        return false;
    }
    return true;
#else
    (void)what;
    *why = "no seccomp filter for this architecture in the tests";
    return false;
#endif
}

#endif
